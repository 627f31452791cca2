#include "parts.h"
int delta(int x) {
  return x * 5 + 1;
}
