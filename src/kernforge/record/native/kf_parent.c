/* kernforge driver interposer: the program ends with the kernforge process that started it.
 *
 * `kernforge record` and `kernforge run --deploy` start the program as their child and wait for
 * it. Killed alone (kill -9 of the launcher, a batch system ending it), the launcher would leave
 * the program running on, orphaned, with nobody to read what it records or reports. So the
 * launcher names itself in KERNFORGE_PARENT_PID, and when this library is loaded into a process
 * whose parent is that launcher, the process asks the kernel for SIGTERM when its parent dies
 * (PR_SET_PDEATHSIG). Only the launcher's direct child does: the variable is removed from the
 * environment here, so the program's own children (and a shell's commands) are left alone. A
 * launcher that died before the request (killed between its fork and this constructor: the
 * process is already an orphan, its parent no longer the launcher) is noticed by its PID being
 * gone, and the process ends as the request would have ended it; a process whose parent is
 * another while the launcher lives (below a child that did not load this library) is left
 * alone. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

__attribute__((constructor)) static void kf_parent_watch(void) {
  const char *v = getenv("KERNFORGE_PARENT_PID");
  if (v == NULL) return;
  char *end = NULL;
  long pid = strtol(v, &end, 10);
  unsetenv("KERNFORGE_PARENT_PID");
  if (end == v || *end != '\0' || pid <= 1) return;
  if ((long)getppid() != pid) {
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) raise(SIGTERM);  /* the launcher is gone */
    return;
  }
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) return;
  if ((long)getppid() != pid) raise(SIGTERM);  /* the launcher died before the request */
}
