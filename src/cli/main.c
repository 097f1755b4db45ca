/* main.c — placeholder, replaced below */
#include <stdio.h>
int main(void) { puts("kvloom"); return 0; }
