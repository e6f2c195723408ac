/*
 * Faults on demand, read once from the environment at load time.
 *
 *   SOFTRDMA_FAIL_VERB=verb[:count[:errno]][,verb...]
 *       make the named verb fail (e.g. ibv_post_send:3:ENOMEM).  count is how
 *       many calls fail (default: every call); errno is a number or one of
 *       the names below (default: ENOMEM for verbs that allocate or post,
 *       ENOSYS for ibv_get_device_list, ENODEV for ibv_open_device, EIO for
 *       the rest).
 *   SOFTRDMA_FAIL_RATE=p      each call of a listed verb fails with
 *                             probability p (0 < p <= 1), drawn from the seed.
 *   SOFTRDMA_DELAY_NS=n       each send work request runs no earlier than n
 *                             ns after it was posted and after the one
 *                             before it ran (the time a NIC would take).
 *   SOFTRDMA_DELAY_JITTER_NS=n   plus a uniform random 0..n, from the seed.
 *   SOFTRDMA_RC_DROP=p        each RC request and each acknowledgement is
 *                             lost with probability p: the requester waits
 *                             its ACK timeout and retries (retry_cnt).
 *   SOFTRDMA_SEED=s           seed of the generator (default 1): the same
 *                             seed gives the same sequence of faults.
 *   SOFTRDMA_UD_DROP=p        each UD datagram, for each receiver on its
 *                             own, is lost with probability p;
 *   SOFTRDMA_UD_DUP=p         delivered twice with probability p;
 *   SOFTRDMA_UD_REORDER=p     held back with probability p and delivered
 *                             after the next datagram to that receiver.
 *   SOFTRDMA_UD_LOG=path      one line appended per injected event:
 *                             "drop|dup|reorder <dest-qpn> <imm> <byte_len>"
 *                             (imm in host order, byte_len as the receive
 *                             would report it, GRH included); datagrams lost
 *                             for want of a posted receive are logged too,
 *                             as "norecv".
 *
 * Settings read here too (the strictness knobs):
 *   SOFTRDMA_GRANT_INLINE=n   grant at most n bytes of inline data per QP.
 *   SOFTRDMA_POISON_WC=0      leave the undefined fields of error
 *                             completions alone (default: poisoned).
 *   SOFTRDMA_SPIN_NS=n        how long the engine's thread spins for more
 *                             work before it sleeps (default 20000).
 *   SOFTRDMA_NO_IPC_LOCK=1    charge RLIMIT_MEMLOCK as if the process had no
 *                             CAP_IPC_LOCK.
 *   SOFTRDMA_LOG_ERRORS=1     one line on stderr per error completion (2:
 *                             flushes too), from the process that makes it.
 *
 * How a verb fails follows its convention: NULL or -1 with errno, or the
 * errno returned (ibv_post_send and ibv_post_recv also set *bad_wr).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SR_FAULT_MAX 16

struct fault {
	char verb[48];
	_Atomic long left;   /* calls still to fail; <0 = unlimited */
	int err;
};

int sr_fault_active;
uint64_t sr_fault_delay_ns;
static uint64_t delay_base, delay_jitter;
static struct fault faults[SR_FAULT_MAX];
static int nfaults;
static double fail_rate = 1.0;
static uint64_t rng_state = 1;
static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;

double sr_ud_drop_p, sr_ud_dup_p, sr_ud_reorder_p;
int sr_ud_faults;
double sr_rc_drop_p;
uint32_t sr_grant_inline = UINT32_MAX;
int sr_poison_wc = 1;
uint64_t sr_spin_ns = 20000;
int sr_no_ipc_lock;
int sr_log_errors;
static uint64_t rc_rng = 1;
static int ud_log_fd = -1;
static uint64_t ud_rng = 1; /* its own stream: UD draws do not shift others */

static uint64_t rng_next(void)
{
	pthread_mutex_lock(&rng_lock);
	uint64_t x = rng_state; /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	pthread_mutex_unlock(&rng_lock);
	return x * 0x2545f4914f6cdd1dull;
}

static const struct { const char *name; int err; } errnames[] = {
	{"ENOMEM", ENOMEM}, {"EINVAL", EINVAL}, {"EAGAIN", EAGAIN},
	{"EIO", EIO}, {"EBUSY", EBUSY}, {"ENOSYS", ENOSYS},
	{"EOPNOTSUPP", EOPNOTSUPP}, {"EPERM", EPERM}, {"ENODEV", ENODEV},
	{"EFAULT", EFAULT}, {"ETIMEDOUT", ETIMEDOUT},
};

static int default_err(const char *verb)
{
	if (!strcmp(verb, "ibv_get_device_list"))
		return ENOSYS;
	if (!strcmp(verb, "ibv_open_device"))
		return ENODEV;
	if (strstr(verb, "create") || strstr(verb, "alloc") ||
	    strstr(verb, "reg_mr") || strstr(verb, "post_"))
		return ENOMEM;
	return EIO;
}

static int parse_err(const char *s)
{
	for (size_t i = 0; i < sizeof errnames / sizeof errnames[0]; i++)
		if (!strcmp(s, errnames[i].name))
			return errnames[i].err;
	int e = atoi(s);
	return e > 0 ? e : EIO;
}

static double env_prob(const char *name)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return 0;
	char *end;
	double p = strtod(s, &end);
	if (*end || !(p >= 0 && p <= 1)) {
		fprintf(stderr, "softrdma: %s='%s' is not a probability in [0,1]; "
			"ignored\n", name, s);
		return 0;
	}
	return p;
}

double sr_ud_rand(void)
{
	pthread_mutex_lock(&rng_lock);
	uint64_t x = ud_rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	ud_rng = x;
	pthread_mutex_unlock(&rng_lock);
	return (double)((x * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

double sr_rc_rand(void)
{
	pthread_mutex_lock(&rng_lock);
	uint64_t x = rc_rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rc_rng = x;
	pthread_mutex_unlock(&rng_lock);
	return (double)((x * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

void sr_ud_log(const char *what, uint32_t qpn, uint32_t imm_host,
	       uint32_t byte_len)
{
	if (ud_log_fd < 0)
		return;
	char line[96];
	int n = snprintf(line, sizeof line, "%s %u %u %u\n", what, qpn, imm_host,
			 byte_len);
	/* O_APPEND: one write per line stays whole among several writers */
	if (write(ud_log_fd, line, (size_t)n) < 0)
		return;
}

void sr_fault_init(void)
{
	const char *s = getenv("SOFTRDMA_SEED");
	if (s && *s)
		rng_state = strtoull(s, NULL, 0) * 0x9e3779b97f4a7c15ull;
	if (!rng_state)
		rng_state = 1;
	ud_rng = rng_state ^ 0xd1b54a32d192ed03ull;
	if (!ud_rng)
		ud_rng = 1;
	rc_rng = rng_state ^ 0x8cb92ba72f3d8dd7ull;
	if (!rc_rng)
		rc_rng = 1;
	sr_rc_drop_p = env_prob("SOFTRDMA_RC_DROP");
	s = getenv("SOFTRDMA_GRANT_INLINE");
	if (s && *s)
		sr_grant_inline = (uint32_t)strtoul(s, NULL, 0);
	s = getenv("SOFTRDMA_POISON_WC");
	if (s && *s)
		sr_poison_wc = atoi(s) != 0;
	s = getenv("SOFTRDMA_SPIN_NS");
	if (s && *s)
		sr_spin_ns = strtoull(s, NULL, 0);
	s = getenv("SOFTRDMA_LOG_ERRORS");
	sr_log_errors = s && *s ? atoi(s) : 0;
	s = getenv("SOFTRDMA_NO_IPC_LOCK");
	sr_no_ipc_lock = s && *s && atoi(s) != 0;
	sr_ud_drop_p = env_prob("SOFTRDMA_UD_DROP");
	sr_ud_dup_p = env_prob("SOFTRDMA_UD_DUP");
	sr_ud_reorder_p = env_prob("SOFTRDMA_UD_REORDER");
	s = getenv("SOFTRDMA_UD_LOG");
	if (s && *s) {
		ud_log_fd = open(s, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (ud_log_fd < 0)
			fprintf(stderr, "softrdma: SOFTRDMA_UD_LOG=%s: %s\n", s,
				strerror(errno));
	}
	sr_ud_faults = sr_ud_drop_p > 0 || sr_ud_dup_p > 0 ||
		       sr_ud_reorder_p > 0 || ud_log_fd >= 0;
	s = getenv("SOFTRDMA_DELAY_NS");
	if (s)
		delay_base = strtoull(s, NULL, 0);
	s = getenv("SOFTRDMA_DELAY_JITTER_NS");
	if (s)
		delay_jitter = strtoull(s, NULL, 0);
	sr_fault_delay_ns = delay_base + delay_jitter;
	s = getenv("SOFTRDMA_FAIL_RATE");
	if (s && *s) {
		fail_rate = strtod(s, NULL);
		if (!(fail_rate > 0 && fail_rate <= 1))
			fail_rate = 1.0;
	}
	s = getenv("SOFTRDMA_FAIL_VERB");
	if (!s || !*s)
		return;
	char buf[512];
	snprintf(buf, sizeof buf, "%s", s);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok && nfaults < SR_FAULT_MAX;
	     tok = strtok_r(NULL, ",", &save)) {
		struct fault *f = &faults[nfaults];
		char *cnt = strchr(tok, ':'), *err = NULL;
		if (cnt) {
			*cnt++ = 0;
			err = strchr(cnt, ':');
			if (err)
				*err++ = 0;
		}
		snprintf(f->verb, sizeof f->verb, "%s", tok);
		atomic_store(&f->left, cnt && *cnt ? strtol(cnt, NULL, 0) : -1);
		f->err = err && *err ? parse_err(err) : default_err(f->verb);
		nfaults++;
	}
	sr_fault_active = nfaults > 0;
}

int sr_fault_hit(const char *verb)
{
	for (int i = 0; i < nfaults; i++) {
		struct fault *f = &faults[i];
		if (strcmp(f->verb, verb))
			continue;
		if (fail_rate < 1.0 &&
		    (double)(rng_next() >> 11) / 9007199254740992.0 >= fail_rate)
			return 0;
		long left = atomic_load(&f->left);
		while (left != 0) {
			if (left < 0 ||
			    atomic_compare_exchange_weak(&f->left, &left, left - 1))
				return f->err;
		}
		return 0;
	}
	return 0;
}

uint64_t sr_fault_delay(void)
{
	uint64_t d = delay_base;
	if (delay_jitter)
		d += rng_next() % (delay_jitter + 1);
	return d;
}
