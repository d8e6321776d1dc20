/*
 * The local backend's command launcher: a sandbox's spawner (`forkserver`) starts each
 * command through `rollout_launch` instead of forking its own Python.
 *
 * A forked Python pays for its copied address space: page tables copied in the spawner,
 * page faults in the child as the interpreter touches its heap, teardown at exec (about
 * 0.8 ms of CPU a command on two cores, docs/benchmarks.md). Here the child shares the
 * spawner's memory and borrows a stack of its own until it execs (clone with CLONE_VM and
 * CLONE_VFORK, as posix_spawn does), running only the system calls below. posix_spawn
 * itself cannot set what a command needs: its rlimits, its tag group and uid, and in an
 * image sandbox its user namespace, seccomp filter and bounding set.
 *
 * A user namespace cannot be entered by a task that shares its memory (the kernel refuses
 * setns when the mm has other users), so a command entering one gets a copied address
 * space (clone without CLONE_VM): still no Python run in the child.
 *
 * The child uses raw system calls for the ids: glibc's wrappers would try to reach every
 * thread of the process whose memory it shares. Every failure before exec is reported on
 * the command's stderr as the Python path reports it ("rollout sandbox: cannot start
 * NAME: ...") and exits 127.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define STACK_BYTES (256 * 1024)
#define CAP_SYS_RESOURCE_BIT 24
#define SECCOMP_MODE_FILTER_VALUE 2

/* What to start: the fields mirror `launcher.Launch` (ctypes) exactly. */
struct launch {
    const char *program;
    char *const *argv;
    char *const *envp;
    const char *cwd;
    const int *stdio; /* stdio[i] becomes descriptor i */
    int stdio_count;
    const int *limit_resources;
    const unsigned long long *limit_values; /* soft and hard alike */
    int limit_count;
    long long uid; /* -1: the spawner's own */
    const unsigned int *groups;
    int group_count;
    int user_namespace; /* -1: none */
    const void *filter; /* struct sock_fprog, installed inside the user namespace */
};

struct child {
    const struct launch *spec;
    sigset_t mask; /* the spawner's, restored just before exec */
};

static char *stack;

static size_t append(char *line, size_t used, size_t room, const char *text) {
    size_t length = strlen(text);
    if (length > room - used) {
        length = room - used;
    }
    memcpy(line + used, text, length);
    return used + length;
}

static void fail(const struct launch *spec, const char *what, int error) {
    char line[1024];
    size_t room = sizeof line - 1, used = 0;
    const char *description = strerrordesc_np(error);
    used = append(line, used, room, "rollout sandbox: cannot start ");
    used = append(line, used, room, spec->argv[0]);
    used = append(line, used, room, ": ");
    used = append(line, used, room, what);
    used = append(line, used, room, ": ");
    used = append(line, used, room, description != NULL ? description : "unknown error");
    used = append(line, used, room, "\n");
    (void)!write(2, line, used);
    _exit(127);
}

/* No handler of the spawner's may run here, in memory it shares: caught signals go back
 * to their defaults (an exec would do the same), then the spawner's mask is restored. */
static void default_handlers(const sigset_t *mask) {
    for (int number = 1; number < NSIG; number++) {
        struct sigaction action;
        if (sigaction(number, NULL, &action) != 0) {
            continue; /* SIGKILL, SIGSTOP, glibc's own */
        }
        if (action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN) {
            action.sa_handler = SIG_DFL;
            sigaction(number, &action, NULL);
        }
    }
    sigprocmask(SIG_SETMASK, mask, NULL);
}

static void take_identity(const struct launch *spec) {
    if (spec->user_namespace >= 0) {
        if (syscall(SYS_setns, spec->user_namespace, CLONE_NEWUSER) != 0) {
            fail(spec, "entering the userns", errno);
        }
        if (syscall(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER_VALUE, spec->filter, 0, 0)) {
            fail(spec, "installing the seccomp filter", errno);
        }
        if (spec->uid >= 0 && syscall(SYS_setgroups, 0, NULL) != 0) {
            fail(spec, "setgroups", errno);
        }
        if (syscall(SYS_setresgid, 0, 0, 0) != 0 || syscall(SYS_setresuid, 0, 0, 0) != 0) {
            fail(spec, "becoming root of the userns", errno);
        }
        /* Root there may not raise the namespace's share of the per-user counts
         * (`user_counts`): out of the bounding set, exec leaves it out. */
        if (syscall(SYS_prctl, PR_CAPBSET_DROP, CAP_SYS_RESOURCE_BIT, 0, 0, 0) != 0) {
            fail(spec, "CAP_SYS_RESOURCE", errno);
        }
    } else if (spec->uid >= 0) {
        if (syscall(SYS_setgroups, spec->group_count, spec->groups) != 0) {
            fail(spec, "setgroups", errno);
        }
        if (syscall(SYS_setresgid, spec->uid, spec->uid, spec->uid) != 0 ||
            syscall(SYS_setresuid, spec->uid, spec->uid, spec->uid) != 0) {
            fail(spec, "taking the sandbox uid", errno);
        }
    }
}

static int become_command(void *argument) {
    const struct child *child = argument;
    const struct launch *spec = child->spec;
    default_handlers(&child->mask);
    if (setsid() < 0) {
        fail(spec, "setsid", errno);
    }
    for (int target = 0; target < spec->stdio_count; target++) {
        int source = spec->stdio[target];
        int done = source == target ? fcntl(target, F_SETFD, 0) : dup2(source, target);
        if (done < 0) {
            fail(spec, "standard streams", errno);
        }
    }
    /* Before the ids change: raising a hard limit is root's. */
    for (int index = 0; index < spec->limit_count; index++) {
        struct rlimit limit = {spec->limit_values[index], spec->limit_values[index]};
        if (setrlimit(spec->limit_resources[index], &limit) != 0) {
            fail(spec, "setrlimit", errno);
        }
    }
    take_identity(spec);
    if (chdir(spec->cwd) != 0) {
        fail(spec, spec->cwd, errno);
    }
    execve(spec->program, spec->argv, spec->envp);
    fail(spec, spec->program, errno);
    return 127;
}

/* The command's host pid, or -errno when it could not be created. */
long rollout_launch(const struct launch *spec) {
    if (stack == NULL) {
        void *mapped = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (mapped == MAP_FAILED) {
            return -errno;
        }
        stack = mapped;
    }
    struct child child = {.spec = spec};
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &child.mask);
    int flags = SIGCHLD | (spec->user_namespace >= 0 ? 0 : CLONE_VM | CLONE_VFORK);
    pid_t pid = clone(become_command, stack + STACK_BYTES, flags, &child);
    int error = errno;
    sigprocmask(SIG_SETMASK, &child.mask, NULL);
    return pid < 0 ? -error : pid;
}
