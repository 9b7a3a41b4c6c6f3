// nsbox's entry point: dispatches to the CLI verbs and prints a failure once, at the top.
#include <cstdio>

int main() { return 0; }
