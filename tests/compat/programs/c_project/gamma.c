#include "parts.h"
int gamma_part(int x) {
  return x ^ 0x55;
}
