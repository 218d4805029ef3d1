/* The sandbox ("pause") container of the test node's pods, built here because no image can be
 * pulled: it holds the pod's namespaces open, reaps the zombies of a shared PID namespace, and
 * ends on SIGINT or SIGTERM, as Kubernetes' own pause does. Linked statically: its image holds
 * nothing else. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signo) { _exit(signo == SIGTERM ? 0 : 2); }

static void reap(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = stop;
  if (sigaction(SIGINT, &action, NULL) < 0 || sigaction(SIGTERM, &action, NULL) < 0) return 1;
  action.sa_handler = reap;
  action.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGCHLD, &action, NULL) < 0) return 1;
  for (;;) pause();
}
