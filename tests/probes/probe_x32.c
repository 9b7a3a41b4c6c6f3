/* Probe: makes an x32 system call (syscall number | __X32_SYSCALL_BIT, getuid): the other non-native ABI on x86_64.
   Prints the raw return value (a negative errno when the kernel or the filter refuses it). */
#include <stdio.h>

int main(void) {
  long ret;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(0x40000000L | 102L) : "rcx", "r11", "memory");  /* 102 = getuid */
  printf("x32 getuid returned %ld\n", ret);
  return 0;
}
