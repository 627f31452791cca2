#include <stdio.h>

#include "parts.h"

int main(void) {
  int total = 0;
  for (int i = 0; i < 100; ++i) total += alpha(i) + beta(i) + gamma_part(i) + delta(i);
  printf("total %d\n", total);
  return 0;
}
