/*
 * nvidia-cuda-mps-control of a fake GPU host built by gpu-runtime's internal/fakehost: the
 * MPS control daemon (-d, -f) and its front end (no argument: commands on stdin), behaving
 * as the real one is documented and has been seen to behave — not as gpu-runtime expects.
 *
 * What the real daemon is known to do, and this one does:
 *  - It takes its pipe and log directories from CUDA_MPS_PIPE_DIRECTORY and
 *    CUDA_MPS_LOG_DIRECTORY (defaults /tmp/nvidia-mps, /var/log/nvidia-mps) and logs to
 *    control.log in the log directory (https://docs.nvidia.com/deploy/topics/topic_5_2_2.html).
 *  - It listens on two SOCK_SEQPACKET Unix sockets in the pipe directory: "control", mode
 *    0666, which CUDA clients connect to (and the MPS servers it starts, as the client's
 *    user), and "control_privileged", mode 0755, which only its owner (root) can connect to;
 *    beside them "control_lock" (0666, locked by the daemon), the FIFO "log" (0777) its
 *    servers write their logs to, and "nvidia-cuda-mps-control.pid" (0666). Seen with ls
 *    and lsof on a running daemon (github.com/ssup2/blog-software,
 *    content/docs/theory-analysis/nvidia-gpu-sharing/index.md), the server's use of "log"
 *    and "control" in strace (github.com/bottlerocket-os/bottlerocket/issues/4673), the
 *    "Starting control daemon using socket <pipe>/control" log line
 *    (github.com/NVIDIA/k8s-device-plugin/issues/1614).
 *  - The front end prints what the daemon answers, a rejected command's error included, on
 *    stdout and exits 0 when it could talk to the daemon; it fails with "Cannot find MPS
 *    control daemon process" when there is none.
 *
 * What NVIDIA does not document, and this fake assumes from the sockets' modes (the write-up
 * above reads them the same way): commands that change the daemon — set_*, start_server,
 * shutdown_server, terminate_client, quit — are accepted only on control_privileged; on
 * control, only queries (get_*). The front end uses control_privileged when it can connect
 * to it, else control. Whether the real daemon also accepts privileged commands from uid 0
 * on "control" is unknown. The fake serves no CUDA client and starts no server.
 *
 * The daemon appends to control.log what it started with ("start CUDA_VISIBLE_DEVICES=...",
 * "shm <dev>:<ino>" of its /dev/shm), every command it accepts ("cmd <command>") and every
 * one it refuses ("refused <command> from uid <uid>: not privileged"), so that tests see
 * exactly what reached it. It opens its files as a plain daemon would, following links: the
 * directories it is given must be safe.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_CONNS 64
#define MAX_MSG 4096
#define MAX_DEVICES 64

static const char *pipe_dir = "/tmp/nvidia-mps";
static const char *log_dir = "/var/log/nvidia-mps";

static char *join(const char *dir, const char *name) {
    static char buf[8][PATH_MAX];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, PATH_MAX, "%s/%s", dir, name);
    return b;
}

static void logline(const char *fmt, ...) {
    FILE *f = fopen(join(log_dir, "control.log"), "a");
    if (!f) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static int listen_on(const char *name, mode_t mode) {
    const char *p = join(pipe_dir, name);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(p) >= sizeof(addr.sun_path)) {
        fprintf(stderr, "nvidia-cuda-mps-control: socket path too long: %s\n", p);
        exit(1);
    }
    strcpy(addr.sun_path, p);
    unlink(p);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || chmod(p, mode) != 0 ||
        listen(fd, 64) != 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: %s: %s\n", p, strerror(errno));
        exit(1);
    }
    return fd;
}

/* The daemon's state: the defaults it gives the servers it would start. */
static int active_threads = 100;
static char pinned[MAX_DEVICES][32];

static void cleanup(void) {
    unlink(join(pipe_dir, "control"));
    unlink(join(pipe_dir, "control_privileged"));
    unlink(join(pipe_dir, "nvidia-cuda-mps-control.pid"));
}

/* privileged_command: the commands that change the daemon (the documented ones). */
static int privileged_command(const char *word) {
    static const char *const words[] = {"quit", "start_server", "shutdown_server", "terminate_client", NULL};
    for (int i = 0; words[i]; i++) {
        if (strcmp(word, words[i]) == 0) {
            return 1;
        }
    }
    return strncmp(word, "set_", 4) == 0;
}

/* answer executes one command and writes the reply: '+' or '-', then the text to print. It
 * returns 1 for quit. */
static int answer(const char *cmd, int privileged, uid_t uid, char *reply, size_t n) {
    char word[64] = "";
    sscanf(cmd, "%63s", word);
    int dev, pct;
    char value[32];
    if (privileged_command(word) && !privileged) {
        logline("refused %s from uid %u: not privileged", cmd, (unsigned)uid);
        snprintf(reply, n, "-%s: not permitted on this connection", word);
        return 0;
    }
    if (strcmp(cmd, "get_default_active_thread_percentage") == 0) {
        snprintf(reply, n, "+%d", active_threads);
    } else if (sscanf(cmd, "get_default_device_pinned_mem_limit %d", &dev) == 1 && dev >= 0 && dev < MAX_DEVICES) {
        snprintf(reply, n, "+%s", pinned[dev][0] ? pinned[dev] : "0");
    } else if (strcmp(cmd, "get_server_list") == 0) {
        snprintf(reply, n, "+");
    } else if (sscanf(cmd, "set_default_active_thread_percentage %d", &pct) == 1) {
        if (pct < 1 || pct > 100) {
            snprintf(reply, n, "-Invalid active thread percentage %d", pct);
            return 0;
        }
        active_threads = pct;
        logline("cmd %s", cmd);
        snprintf(reply, n, "+");
    } else if (sscanf(cmd, "set_default_device_pinned_mem_limit %d %31s", &dev, value) == 2) {
        if (dev < 0 || dev >= MAX_DEVICES) {
            snprintf(reply, n, "-Invalid device %d", dev);
            return 0;
        }
        snprintf(pinned[dev], sizeof pinned[dev], "%s", value);
        logline("cmd %s", cmd);
        snprintf(reply, n, "+");
    } else if (privileged_command(word)) {
        logline("cmd %s", cmd);
        snprintf(reply, n, "+");
        return strcmp(word, "quit") == 0;
    } else {
        snprintf(reply, n, "-Unknown command %s", word);
    }
    return 0;
}

static int daemon_main(void) {
    mkdir(pipe_dir, 0755);
    mkdir(log_dir, 0755);
    int lock = open(join(pipe_dir, "control_lock"), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lock < 0 || fchmod(lock, 0666) != 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: %s: %s\n", join(pipe_dir, "control_lock"), strerror(errno));
        return 1;
    }
    if (flock(lock, LOCK_EX | LOCK_NB) != 0) {
        fprintf(stderr, "An instance of this daemon is already running\n");
        return 1;
    }
    const char *pidfile = join(pipe_dir, "nvidia-cuda-mps-control.pid");
    FILE *pf = fopen(pidfile, "w");
    if (!pf) {
        fprintf(stderr, "nvidia-cuda-mps-control: %s: %s\n", pidfile, strerror(errno));
        return 1;
    }
    fprintf(pf, "%d", (int)getpid());
    fclose(pf);
    chmod(pidfile, 0666);
    const char *fifo = join(pipe_dir, "log");
    unlink(fifo);
    if (mkfifo(fifo, 0777) != 0 || chmod(fifo, 0777) != 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: %s: %s\n", fifo, strerror(errno));
        return 1;
    }
    int logfd = open(fifo, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    int priv = listen_on("control_privileged", 0755);
    int ctl = listen_on("control", 0666);

    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    struct stat shm;
    logline("start CUDA_VISIBLE_DEVICES=%s", visible ? visible : "unset");
    if (stat("/dev/shm", &shm) == 0) {
        logline("shm %lu:%lu", (unsigned long)shm.st_dev, (unsigned long)shm.st_ino);
    }

    struct pollfd fds[3 + MAX_CONNS];
    int privileged[3 + MAX_CONNS];
    int nfds = 3;
    fds[0] = (struct pollfd){.fd = priv, .events = POLLIN};
    fds[1] = (struct pollfd){.fd = ctl, .events = POLLIN};
    fds[2] = (struct pollfd){.fd = logfd, .events = POLLIN};
    for (;;) {
        if (poll(fds, nfds, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return 1;
        }
        if (fds[2].revents & POLLIN) { /* what servers log: into server.log */
            char buf[MAX_MSG];
            ssize_t r = read(logfd, buf, sizeof buf);
            FILE *f = r > 0 ? fopen(join(log_dir, "server.log"), "a") : NULL;
            if (f) {
                fwrite(buf, 1, (size_t)r, f);
                fclose(f);
            }
        }
        for (int l = 0; l < 2; l++) {
            if (!(fds[l].revents & POLLIN)) {
                continue;
            }
            int c = accept4(fds[l].fd, NULL, NULL, SOCK_CLOEXEC);
            if (c < 0) {
                continue;
            }
            if (nfds == 3 + MAX_CONNS) {
                close(c);
                continue;
            }
            privileged[nfds] = l == 0;
            fds[nfds++] = (struct pollfd){.fd = c, .events = POLLIN};
        }
        for (int i = 3; i < nfds; i++) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                continue;
            }
            char msg[MAX_MSG + 1];
            ssize_t r = recv(fds[i].fd, msg, MAX_MSG, 0);
            if (r <= 0) {
                close(fds[i].fd);
                fds[i] = fds[nfds - 1];
                privileged[i] = privileged[nfds - 1];
                nfds--;
                i--;
                continue;
            }
            msg[r] = 0;
            struct ucred cred = {.uid = (uid_t)-1};
            socklen_t len = sizeof cred;
            getsockopt(fds[i].fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
            char reply[MAX_MSG];
            int quit = answer(msg, privileged[i], cred.uid, reply, sizeof reply);
            send(fds[i].fd, reply, strlen(reply), MSG_NOSIGNAL);
            if (quit) {
                cleanup();
                return 0;
            }
        }
    }
}

/* connect_to connects to one of the daemon's sockets; -1 when it cannot. */
static int connect_to(const char *name) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", join(pipe_dir, name));
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
        return fd;
    }
    if (fd >= 0) {
        close(fd);
    }
    return -1;
}

static int frontend_main(void) {
    int fd = connect_to("control_privileged");
    if (fd < 0) {
        fd = connect_to("control");
    }
    if (fd < 0) {
        fprintf(stderr, "Cannot find MPS control daemon process\n");
        return 1;
    }
    char line[MAX_MSG];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] == 0) {
            continue;
        }
        if (send(fd, line, strlen(line), MSG_NOSIGNAL) < 0) {
            fprintf(stderr, "Connection to the MPS control daemon was broken\n");
            return 1;
        }
        char reply[MAX_MSG + 1];
        ssize_t r = recv(fd, reply, MAX_MSG, 0);
        if (r <= 0) {
            fprintf(stderr, "Connection to the MPS control daemon was broken\n");
            return 1;
        }
        reply[r] = 0;
        if (reply[1]) {
            printf("%s\n", reply + 1);
            fflush(stdout);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *p = getenv("CUDA_MPS_PIPE_DIRECTORY");
    const char *l = getenv("CUDA_MPS_LOG_DIRECTORY");
    if (p && *p) {
        pipe_dir = p;
    }
    if (l && *l) {
        log_dir = l;
    }
    if (argc < 2) {
        return frontend_main();
    }
    if (strcmp(argv[1], "-f") == 0) {
        return daemon_main();
    }
    if (strcmp(argv[1], "-d") == 0) {
        pid_t pid = fork();
        if (pid != 0) {
            return pid < 0;
        }
        setsid();
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        return daemon_main();
    }
    fprintf(stderr, "nvidia-cuda-mps-control: unknown option %s\n", argv[1]);
    return 1;
}
