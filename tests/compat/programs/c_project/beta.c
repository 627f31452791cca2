#include "parts.h"
int beta(int x) {
  return x * 4 + 1;
}
