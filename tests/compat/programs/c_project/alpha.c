#include "parts.h"
int alpha(int x) {
  return x * 5 + 1;
}
