/* Linked statically: LD_PRELOAD has no effect on it. */
#include <stdio.h>

int main(int argc, char** argv) {
  printf("static, %d arguments, first %s\n", argc, argc > 1 ? argv[1] : "-");
  return 5;
}
