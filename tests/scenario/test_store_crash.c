/*
 * The retransmit store across real crashes: a writer process killed with
 * SIGKILL, then the store opened again by another.
 *
 * Appends copy records into the mapped active segment (store.c, Appending):
 * a record whose append returned is in the page cache, not in the process,
 * so SIGKILL must lose none of them, and the room the writer had made ahead
 * of its data must be cut quietly, not reported as a torn tail.  A write
 * coalescing buffer inside the process would fail both tests below.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/recovery/store.h"

#include "bus/barrier.h"
#include "bus/error.h"
#include "tests/common/rng.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STREAM 11
#define EPOCH 42
#define SEG_BYTES (256u << 10)  /* rolls every ~2,000 records */
#define ROUNDS 5

static char tmp[64];
static char root[128];
static uint8_t fbuf[4096] __attribute__((aligned(8)));

static uint32_t plen(uint64_t seq)
{
	return 16 + (uint32_t)(seq * 37 % 200);
}

static uint8_t pattern(uint64_t seq, uint32_t i)
{
	return (uint8_t)(seq * 131 + i * 7 + (seq >> 8));
}

static const tb_frame_hdr_t *frame(uint64_t seq)
{
	tb_frame_hdr_t *f = (tb_frame_hdr_t *)fbuf;
	uint32_t n = plen(seq);

	tb_frame_init(f, n, 3, STREAM, seq, seq * 1000);
	for (uint32_t i = 0; i < n; i++)
		fbuf[TB_FRAME_HDR_LEN + i] = pattern(seq, i);
	return f;
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st; (void)flag; (void)f;
	return remove(p);
}

static int setup(void **state)
{
	(void)state;
	strcpy(tmp, "/tmp/tb_store_crash.XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	snprintf(root, sizeof(root), "%s/store", tmp);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return nftw(tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void cfg_make(tb_store_cfg_t *c)
{
	tb_store_cfg_init(c);
	snprintf(c->dir, sizeof(c->dir), "%s", root);
	c->stream_id = STREAM;
	c->epoch = EPOCH;
	c->segment_bytes = SEG_BYTES;
}

typedef struct check {
	uint64_t next;
} check_t;

static int on_frame(void *clientd, const tb_frame_hdr_t *f)
{
	check_t *c = clientd;
	const uint8_t *p = (const uint8_t *)f + TB_FRAME_HDR_LEN;

	assert_int_equal(f->seq, c->next);
	assert_int_equal(f->length, TB_FRAME_HDR_LEN + plen(f->seq));
	assert_int_equal(f->publish_ns, f->seq * 1000);
	for (uint32_t i = 0; i < plen(f->seq); i++)
		if (p[i] != pattern(f->seq, i))
			fail_msg("seq %" PRIu64 " byte %u differs", f->seq, i);
	c->next++;
	return 0;
}

/* Opens the store (stderr into `log`), checks it holds 1..last intact with
 * no lost range, and returns its last sequence. */
static uint64_t reopen_and_check(char *log, size_t loglen)
{
	char logp[200];
	tb_store_cfg_t c;
	tb_store_t *s = NULL;
	check_t chk = {1};
	uint64_t last;
	int saved, fd, r;
	ssize_t got;

	snprintf(logp, sizeof(logp), "%s/open.log", tmp);
	fflush(stderr);
	saved = dup(2);
	fd = open(logp, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	dup2(fd, 2);
	cfg_make(&c);
	r = tb_store_open(&s, &c);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	got = pread(fd, log, loglen - 1, 0);
	close(fd);
	log[got > 0 ? got : 0] = '\0';
	if (r != 0)
		fail_msg("reopen: %s", tb_errmsg());
	last = tb_store_last_seq(s);
	assert_int_equal(tb_store_first_seq(s), 1);
	while (chk.next <= last) {
		r = tb_store_read(s, chk.next, 4096, on_frame, &chk);
		if (r <= 0)
			fail_msg("read at %" PRIu64 ": %d %s", chk.next, r, tb_errmsg());
	}
	tb_store_close(s);
	return last;
}

/* Size of the newest segment file. */
static off_t active_file_size(void)
{
	char d[256], best[64] = "", p[400];
	struct dirent *de;
	struct stat st;
	DIR *dp;

	snprintf(d, sizeof(d), "%s/%u-%016x", root, STREAM, EPOCH);
	dp = opendir(d);
	assert_non_null(dp);
	while ((de = readdir(dp))) {
		size_t n = strlen(de->d_name);

		if (n > 4 && !strcmp(de->d_name + n - 4, ".seg") &&
		    n < sizeof(best) && strcmp(de->d_name, best) > 0)
			strcpy(best, de->d_name);
	}
	closedir(dp);
	assert_true(best[0] != '\0');
	snprintf(p, sizeof(p), "%s/%s", d, best);
	assert_int_equal(stat(p, &st), 0);
	return st.st_size;
}

/*
 * A writer appends from `from` to `to`, tells the parent the last sequence
 * it appended, and waits to be killed.  Nothing is closed, synced or
 * flushed: whatever is on disk afterwards got there while append returned.
 */
static void sigkill_after_appends_loses_nothing(void **state)
{
	uint64_t rng = 0xc0ffeeull, last = 0;

	(void)state;
	for (int round = 0; round < ROUNDS; round++) {
		uint64_t to = last + 5000 + rng_xorshift64s(&rng) % 20000, told = 0;
		int pipefd[2], st;
		char log[4096];
		off_t before;
		pid_t pid;

		assert_int_equal(pipe(pipefd), 0);
		fflush(NULL);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			tb_store_cfg_t c;
			tb_store_t *s = NULL;

			close(pipefd[0]);
			cfg_make(&c);
			if (tb_store_open(&s, &c) != 0)
				_exit(2);
			for (uint64_t q = last + 1; q <= to; q++)
				if (tb_store_append(s, frame(q)) != 0)
					_exit(3);
			if (write(pipefd[1], &to, sizeof(to)) != sizeof(to))
				_exit(4);
			for (;;)
				pause();
		}
		close(pipefd[1]);
		assert_int_equal(read(pipefd[0], &told, sizeof(told)), sizeof(told));
		close(pipefd[0]);
		assert_int_equal(told, to);
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

		before = active_file_size();
		last = reopen_and_check(log, sizeof(log));
		assert_int_equal(last, to);                   /* nothing lost */
		/* The writer had room ahead of its data, cut without a word. */
		assert_true(before > active_file_size());
		assert_null(strstr(log, "torn tail"));
		assert_null(strstr(log, "warning"));
	}
}

/*
 * A writer appends as fast as it can, publishing in shared memory the last
 * sequence whose append returned; it is killed at a random moment, most
 * likely in the middle of a copy.  Every acknowledged record is there, at
 * most the one in flight besides, and the next writer goes on after them.
 */
static void sigkill_mid_append_keeps_every_acknowledged_record(void **state)
{
	_Atomic uint64_t *acked;
	uint64_t rng = 0xfeedull, last = 0;

	(void)state;
	acked = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		     -1, 0);
	assert_true(acked != MAP_FAILED);
	for (int round = 0; round < ROUNDS; round++) {
		uint64_t start = last, at_kill, t0;
		char log[4096];
		pid_t pid;
		int st;

		/* R1 pairs with A1 below. */
		tb_atomic_store_release(acked, start);
		fflush(NULL);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			tb_store_cfg_t c;
			tb_store_t *s = NULL;

			cfg_make(&c);
			if (tb_store_open(&s, &c) != 0)
				_exit(2);
			for (uint64_t q = start + 1;; q++) {
				if (tb_store_append(s, frame(q)) != 0)
					_exit(3);
				/* R1: the append of q has returned. */
				tb_atomic_store_release(acked, q);
			}
		}
		/* Let it write a few segments, then a random moment more. */
		t0 = (uint64_t)time(NULL);
		while (tb_atomic_load_acquire(acked) < start + 3000) { /* A1 */
			assert_true((uint64_t)time(NULL) - t0 < 30);
			assert_int_equal(waitpid(pid, &st, WNOHANG), 0);
			usleep(200);
		}
		usleep((useconds_t)(rng_xorshift64s(&rng) % 3000));
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		at_kill = tb_atomic_load_acquire(acked); /* A1: its last word */

		last = reopen_and_check(log, sizeof(log));
		assert_true(last >= at_kill);
		assert_true(last <= at_kill + 1);
	}
	munmap((void *)acked, 4096);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(sigkill_after_appends_loses_nothing,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			sigkill_mid_append_keeps_every_acknowledged_record, setup,
			teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
