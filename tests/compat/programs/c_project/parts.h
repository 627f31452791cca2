int alpha(int), beta(int), gamma_part(int), delta(int);
