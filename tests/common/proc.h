/*
 * proc.h - running the real tickbus binaries from scenario tests: start a
 * program with its output in a file, wait for it with a deadline, kill it,
 * and read "key=value" fields from what it printed.  Every process a test
 * starts is stopped by the test (proc_reap_all at the end, or on failure by
 * the atexit hook).
 */
#ifndef TB_TEST_PROC_H
#define TB_TEST_PROC_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define PROC_MAX 32

typedef struct proc {
	pid_t pid;
	int status;   /* wait status once exited */
	int exited;
	char out[256]; /* file with its stdout and stderr */
} proc_t;

/* The pids started and not yet reaped: pids, not pointers, since a test's
 * proc_t may live on a stack frame that is gone by the time the atexit
 * hook or a teardown runs. */
static pid_t proc_live[PROC_MAX];

static inline void proc_forget(pid_t pid)
{
	for (int i = 0; i < PROC_MAX; i++)
		if (proc_live[i] == pid)
			proc_live[i] = 0;
}

static inline void proc_kill_all(void)
{
	for (int i = 0; i < PROC_MAX; i++)
		if (proc_live[i] > 0) {
			kill(proc_live[i], SIGKILL);
			waitpid(proc_live[i], NULL, 0);
			proc_live[i] = 0;
		}
}

/* A loopback TCP port nothing listens on now (0 if none could be had). */
static inline unsigned proc_free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	unsigned port = 0;

	if (fd < 0)
		return 0;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/* The directory of the built programs ($TB_BIN, set by tests/run-tests.sh). */
static inline const char *proc_bin_dir(void)
{
	const char *d = getenv("TB_BIN");

	return d && *d ? d : "build/bin";
}

/* Starts bin_dir/prog with argv (NULL-terminated, argv[0] = prog), stdout
 * and stderr to `out`.  Returns 0 or -1. */
static inline int proc_start(proc_t *p, const char *out, char *const argv[])
{
	static int hooked;
	posix_spawn_file_actions_t fa;
	char path[512];
	int rc;

	if (!hooked) {
		atexit(proc_kill_all);
		hooked = 1;
	}
	memset(p, 0, sizeof(*p));
	snprintf(p->out, sizeof(p->out), "%s", out);
	snprintf(path, sizeof(path), "%s/%s", proc_bin_dir(), argv[0]);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	rc = posix_spawn(&p->pid, path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		fprintf(stderr, "spawn %s: %s\n", path, strerror(rc));
		return -1;
	}
	for (int i = 0; i < PROC_MAX; i++)
		if (proc_live[i] == 0) {
			proc_live[i] = p->pid;
			break;
		}
	return 0;
}

static inline uint64_t proc_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Waits up to `ms` for `p` to exit.  Returns its exit code, 128+signal if
 * killed, or -1 on timeout (the process is then killed). */
static inline int proc_wait(proc_t *p, uint64_t ms)
{
	uint64_t until = proc_now_ms() + ms;

	while (!p->exited) {
		pid_t r = waitpid(p->pid, &p->status, WNOHANG);

		if (r == p->pid) {
			p->exited = 1;
			proc_forget(p->pid);
			break;
		}
		if (proc_now_ms() > until) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &p->status, 0);
			p->exited = 1;
			proc_forget(p->pid);
			fprintf(stderr, "timeout: killed pid %d (%s)\n", (int)p->pid, p->out);
			return -1;
		}
		usleep(10000);
	}
	if (WIFEXITED(p->status))
		return WEXITSTATUS(p->status);
	return 128 + WTERMSIG(p->status);
}

/* Reads the whole output file of `p` (malloc'd, NUL-terminated; never
 * NULL: a test that cannot allocate a few KB aborts). */
static inline char *proc_output(const proc_t *p)
{
	FILE *f = fopen(p->out, "r");
	char *buf;
	long n = 0;

	if (f) {
		fseek(f, 0, SEEK_END);
		n = ftell(f);
		fseek(f, 0, SEEK_SET);
	}
	buf = malloc((size_t)(n > 0 ? n : 0) + 1);
	if (!buf)
		abort();
	if (!f) {
		buf[0] = '\0';
		return buf;
	}
	n = (long)fread(buf, 1, (size_t)n, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* Waits up to `ms` until `text` appears in p's output; 0, or -1. */
static inline int proc_wait_output(const proc_t *p, const char *text, uint64_t ms)
{
	uint64_t until = proc_now_ms() + ms;

	while (proc_now_ms() < until) {
		char *out = proc_output(p);
		int hit = strstr(out, text) != NULL;

		free(out);
		if (hit)
			return 0;
		usleep(20000);
	}
	return -1;
}

/* Moves this process into a network namespace of its own, with loopback
 * up and a multicast route on it, so that multicast tests meet nothing
 * else.  Returns 0, or 77 (skip) without the privilege, saying why. */
static inline int proc_private_multicast_netns(void)
{
	if (unshare(CLONE_NEWNET) != 0) {
		printf("skip: cannot create a network namespace (needs root)\n");
		return 77;
	}
	if (system("ip link set lo up && ip link set lo multicast on && "
		   "ip route add 224.0.0.0/4 dev lo") != 0) {
		printf("skip: cannot set up multicast on loopback in the namespace\n");
		return 77;
	}
	return 0;
}

/* Copies the value of the last " key=" in `text` into `val`; returns 0 or -1. */
static inline int proc_field(const char *text, const char *key, char *val, size_t len)
{
	char pat[64];
	const char *p, *hit = NULL;
	size_t n = 0;

	snprintf(pat, sizeof(pat), " %s=", key);
	for (p = strstr(text, pat); p; p = strstr(p + 1, pat))
		hit = p;
	if (!hit)
		return -1;
	hit += strlen(pat);
	while (hit[n] && hit[n] != ' ' && hit[n] != '\n' && n + 1 < len) {
		val[n] = hit[n];
		n++;
	}
	val[n] = '\0';
	return 0;
}

static inline uint64_t proc_field_u64(const char *text, const char *key)
{
	char v[64];

	if (proc_field(text, key, v, sizeof(v)) != 0)
		return UINT64_MAX;
	return strtoull(v, NULL, 0);
}

#endif
