/* Prints which preloaded allocator and whether any moescope library is mapped into this
   process; used as a setuid binary (the shim must stay out) and under an existing LD_PRELOAD
   (the program's own preload must stay in). */
#include <stdio.h>
#include <string.h>

int main(void) {
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[4096];
  int moescope = 0, jemalloc = 0;
  while (maps && fgets(line, sizeof(line), maps)) {
    moescope |= strstr(line, "libmoescope") != NULL;
    jemalloc |= strstr(line, "libjemalloc") != NULL;
  }
  if (maps) fclose(maps);
  printf("moescope mapped: %s\njemalloc mapped: %s\n", moescope ? "yes" : "no",
         jemalloc ? "yes" : "no");
  return 3;
}
