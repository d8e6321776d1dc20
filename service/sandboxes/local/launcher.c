/*
 * The local backend's command launcher: a sandbox's spawner (`forkserver`) starts each
 * command through `rollout_launch` instead of forking its own Python.
 *
 * A forked Python pays for its copied address space: page tables copied in the spawner,
 * page faults in the child as the interpreter touches its heap, teardown at exec (about
 * 2 ms of CPU a command here, docs/benchmarks.md). Here the child shares the spawner's
 * memory (clone with CLONE_VM, on a stack the caller keeps alive until the command is
 * reaped) and runs only system calls until it execs. posix_spawn cannot set what a command
 * needs: its rlimits, its tag group and uid, and in an image sandbox its user namespace,
 * seccomp filter and bounding set.
 *
 * The spawner does not wait for the exec (no CLONE_VFORK): once the child has the sandbox
 * uid, any process of the sandbox may SIGSTOP it, and a spawner waiting on it would serve
 * none of the sandbox's other commands. So the child touches nothing the spawner does: its
 * own stack, the spec (read only, kept alive by the caller), and raw system calls, which
 * leave errno (the spawner's thread-local) alone. The descriptor table is the child's own
 * copy (no CLONE_FILES), so the spawner may close its copies at once. A caught signal's
 * handler never runs in the child: every signal is blocked across the clone, the child puts
 * caught ones back to their defaults and restores the spawner's mask last, just before exec.
 *
 * A user namespace cannot be entered by a task that shares its memory (the kernel refuses
 * setns when the mm has other users), so a command entering one gets a copied address space
 * (clone without CLONE_VM), still running no Python. Every failure before exec is reported
 * on the command's stderr as the Python path reports it ("rollout sandbox: cannot start
 * NAME: ...") and exits 127.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define CAP_SYS_RESOURCE_BIT 24
#define SECCOMP_MODE_FILTER_VALUE 2
#define KERNEL_SIGNALS 64
#define KERNEL_SIGSET_BYTES 8

/* What to start: the fields mirror `launcher._Launch` (ctypes) exactly. */
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

/* Kept at the top of the child's stack: alive as long as the stack is. */
struct child {
    const struct launch *spec;
    unsigned long mask; /* the spawner's, restored just before exec */
};

/* The kernel's own `struct sigaction` (not glibc's), as rt_sigaction takes it. */
struct kernel_sigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    unsigned long mask;
};

/* A system call that returns -errno and never writes errno. */
static long raw(long number, long a, long b, long c, long d, long e) {
#if defined(__x86_64__)
    long result;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return result;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = number;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4)
                     : "memory", "cc");
    return x0;
#else
#error "the launcher knows system calls on x86_64 and aarch64 only"
#endif
}

#define RAW0(n) raw((n), 0, 0, 0, 0, 0)
#define RAW1(n, a) raw((n), (long)(a), 0, 0, 0, 0)
#define RAW2(n, a, b) raw((n), (long)(a), (long)(b), 0, 0, 0)
#define RAW3(n, a, b, c) raw((n), (long)(a), (long)(b), (long)(c), 0, 0)
#define RAW4(n, a, b, c, d) raw((n), (long)(a), (long)(b), (long)(c), (long)(d), 0)
#define RAW5(n, a, b, c, d, e) raw((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e))

static size_t append(char *line, size_t used, size_t room, const char *text) {
    size_t length = strlen(text);
    if (length > room - used) {
        length = room - used;
    }
    memcpy(line + used, text, length);
    return used + length;
}

static void fail(const struct launch *spec, const char *what, long result) {
    char line[1024];
    size_t room = sizeof line, used = 0;
    const char *description = strerrordesc_np((int)-result);
    used = append(line, used, room, "rollout sandbox: cannot start ");
    used = append(line, used, room, spec->argv[0]);
    used = append(line, used, room, ": ");
    used = append(line, used, room, what);
    used = append(line, used, room, ": ");
    used = append(line, used, room, description != NULL ? description : "unknown error");
    used = append(line, used, room, "\n");
    RAW3(SYS_write, 2, line, used);
    RAW1(SYS_exit_group, 127);
    __builtin_unreachable();
}

static void check(const struct launch *spec, const char *what, long result) {
    if (result < 0) {
        fail(spec, what, result);
    }
}

/* Caught signals back to their defaults (exec would do the same), ignored ones kept. */
static void default_handlers(void) {
    for (int number = 1; number <= KERNEL_SIGNALS; number++) {
        struct kernel_sigaction action;
        if (RAW4(SYS_rt_sigaction, number, NULL, &action, KERNEL_SIGSET_BYTES) != 0) {
            continue; /* SIGKILL, SIGSTOP */
        }
        if (action.handler != (void *)SIG_DFL && action.handler != (void *)SIG_IGN) {
            struct kernel_sigaction fallback = {.handler = (void *)SIG_DFL};
            RAW4(SYS_rt_sigaction, number, &fallback, NULL, KERNEL_SIGSET_BYTES);
        }
    }
}

static void take_identity(const struct launch *spec) {
    if (spec->user_namespace >= 0) {
        check(spec, "entering the userns", RAW2(SYS_setns, spec->user_namespace, CLONE_NEWUSER));
        check(spec, "installing the seccomp filter",
              RAW5(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER_VALUE, spec->filter, 0, 0));
        if (spec->uid >= 0) {
            check(spec, "setgroups", RAW2(SYS_setgroups, 0, NULL));
        }
        check(spec, "becoming root of the userns", RAW3(SYS_setresgid, 0, 0, 0));
        check(spec, "becoming root of the userns", RAW3(SYS_setresuid, 0, 0, 0));
        /* Root there may not raise the namespace's share of the per-user counts
         * (`user_counts`): out of the bounding set, exec leaves it out. */
        check(spec, "CAP_SYS_RESOURCE",
              RAW5(SYS_prctl, PR_CAPBSET_DROP, CAP_SYS_RESOURCE_BIT, 0, 0, 0));
    } else if (spec->uid >= 0) {
        check(spec, "setgroups", RAW2(SYS_setgroups, spec->group_count, spec->groups));
        check(spec, "taking the sandbox gid", RAW3(SYS_setresgid, spec->uid, spec->uid, spec->uid));
        check(spec, "taking the sandbox uid", RAW3(SYS_setresuid, spec->uid, spec->uid, spec->uid));
    }
}

static int become_command(void *argument) {
    const struct child *child = argument;
    const struct launch *spec = child->spec;
    default_handlers();
    check(spec, "setsid", RAW0(SYS_setsid));
    for (int target = 0; target < spec->stdio_count; target++) {
        int source = spec->stdio[target];
        long done = source == target ? RAW3(SYS_fcntl, target, F_SETFD, 0)
                                     : RAW3(SYS_dup3, source, target, 0);
        check(spec, "standard streams", done);
    }
    /* Before the ids change: raising a hard limit is root's. */
    for (int index = 0; index < spec->limit_count; index++) {
        struct rlimit limit = {spec->limit_values[index], spec->limit_values[index]};
        check(spec, "setrlimit", RAW4(SYS_prlimit64, 0, spec->limit_resources[index], &limit, NULL));
    }
    take_identity(spec);
    check(spec, spec->cwd, RAW1(SYS_chdir, spec->cwd));
    RAW4(SYS_rt_sigprocmask, SIG_SETMASK, &child->mask, NULL, KERNEL_SIGSET_BYTES);
    fail(spec, spec->program, RAW3(SYS_execve, spec->program, spec->argv, spec->envp));
    return 127;
}

/*
 * Start the command on `stack` (`size` bytes the caller keeps alive until the command has
 * been reaped) without waiting for its exec: its host pid, or -errno when it could not be
 * created.
 */
long rollout_launch(const struct launch *spec, char *stack, size_t size) {
    if (size < 2 * sizeof(struct child)) {
        return -EINVAL;
    }
    uintptr_t top = ((uintptr_t)stack + size - sizeof(struct child)) & ~(uintptr_t)15;
    struct child *child = (struct child *)top;
    child->spec = spec;
    unsigned long all = ~0UL;
    RAW4(SYS_rt_sigprocmask, SIG_SETMASK, &all, &child->mask, KERNEL_SIGSET_BYTES);
    int flags = SIGCHLD | (spec->user_namespace >= 0 ? 0 : CLONE_VM);
    pid_t pid = clone(become_command, child, flags, child);
    int error = errno;
    RAW4(SYS_rt_sigprocmask, SIG_SETMASK, &child->mask, NULL, KERNEL_SIGSET_BYTES);
    return pid < 0 ? -error : pid;
}
