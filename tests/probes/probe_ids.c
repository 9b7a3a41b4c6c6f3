/* Probe: prints the ids and effective capabilities a program holds after execve (setuid/file-caps tests copy it). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
  char line[256], capeff[64] = "?";
  FILE* status = fopen("/proc/self/status", "r");
  while (status && fgets(line, sizeof line, status))
    if (strncmp(line, "CapEff:", 7) == 0) sscanf(line + 7, "%63s", capeff);
  if (status) fclose(status);
  printf("uid=%d euid=%d gid=%d egid=%d capeff=%s\n", (int)getuid(), (int)geteuid(), (int)getgid(), (int)getegid(),
         capeff);
  return 0;
}
