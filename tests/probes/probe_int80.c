/* Probe: makes an i386 system call (int $0x80, getuid32) from a 64-bit process: the non-native-architecture path
   that seccomp filters written for x86_64 alone miss. Prints the raw return value. */
#include <stdio.h>

int main(void) {
  long ret;
  __asm__ volatile("int $0x80" : "=a"(ret) : "a"(199L) : "memory");  /* 199 = getuid32 on i386 */
  printf("int80 getuid32 returned %ld\n", ret);
  return 0;
}
