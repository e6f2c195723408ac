/*
 * test_counters.c - the per-process counters file: writing and reading it in
 * one process, reading another process's while it runs, dead and reused
 * pids, and files that are truncated, corrupt or not files at all.
 *
 * Everything lives in a private directory (TICKBUS_COUNTERS_DIR) that the
 * test removes at the end.
 */
#include "bus/counters.h"
#include "bus/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[128];

static void path_for(char *buf, size_t len, const char *suffix)
{
	snprintf(buf, len, "%s/" TB_COUNTERS_PREFIX "%s", dir, suffix);
}

static void path_for_pid(char *buf, size_t len, pid_t pid)
{
	char s[32];

	snprintf(s, sizeof(s), "%d", (int)pid);
	path_for(buf, len, s);
}

/* Collects what read_dir reports. */
struct seen {
	int n;
	pid_t pids[16];
	tb_counters_proc_t last; /* of `want` */
	pid_t want;
	int found;
};

static int collect(void *arg, const tb_counters_proc_t *p)
{
	struct seen *s = arg;

	if (s->n < 16)
		s->pids[s->n] = p->pid;
	s->n++;
	if (p->pid == s->want) {
		s->found = 1;
		memcpy(&s->last, p, sizeof(*p));
	}
	return 0;
}

static struct seen *scan(pid_t want, unsigned flags, int *rc)
{
	struct seen *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	s->want = want;
	*rc = tb_counters_read_dir(NULL, flags, collect, s);
	return s;
}

static int exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static const tb_counters_stream_t *stream_named(const tb_counters_proc_t *p,
						const char *name)
{
	for (int i = 0; i < p->n_streams; i++)
		if (strcmp(p->streams[i].name, name) == 0)
			return &p->streams[i];
	return NULL;
}

/* ------------------------------------------------------- one process */

static void test_write_and_read_back(void **state)
{
	(void)state;
	tb_counters_proc_t *p = malloc(sizeof(*p));
	tb_counter_slot_t *a, *b;
	const tb_counters_stream_t *s;
	char path[256];
	struct seen *seen;
	int rc;

	assert_non_null(p);
	a = tb_counters_add_stream(7, "quotes", TB_ROLE_PUBLISHER, "shm");
	b = tb_counters_add_stream(9, "trades", TB_ROLE_SUBSCRIBER, "rc");
	assert_non_null(a);
	assert_non_null(b);
	assert_true(a != b);
	assert_int_equal((uintptr_t)a % 64, 0); /* own cache lines */
	path_for_pid(path, sizeof(path), getpid());
	assert_string_equal(tb_counters_path(), path);

	for (int i = 0; i < 1000; i++)
		tb_counter_inc(a, TB_CTR_PUBLISHED);
	tb_counter_add(a, TB_CTR_BACK_PRESSURED, 3);
	tb_counter_add(b, TB_CTR_DELIVERED, 990);
	tb_counter_add(b, TB_CTR_GAPS, 2);
	tb_counter_inc(b, TB_CTR_MALFORMED);
	assert_int_equal(tb_counter_get(a, TB_CTR_PUBLISHED), 1000);
	tb_counters_heartbeat();

	assert_int_equal(tb_counters_read_file(path, p), 0);
	assert_int_equal(p->pid, getpid());
	assert_string_equal(p->name, "test_counters");
	assert_true(p->start_ticks > 0);
	assert_true(p->heartbeat_ns >= p->start_ns);
	assert_int_equal(p->n_counters, TB_CTR_COUNT);
	assert_int_equal(p->n_streams, 2);
	s = stream_named(p, "quotes");
	assert_non_null(s);
	assert_int_equal(s->stream_id, 7);
	assert_int_equal(s->role, TB_ROLE_PUBLISHER);
	assert_string_equal(s->transport, "shm");
	assert_int_equal(s->c[TB_CTR_PUBLISHED], 1000);
	assert_int_equal(s->c[TB_CTR_BACK_PRESSURED], 3);
	s = stream_named(p, "trades");
	assert_non_null(s);
	assert_int_equal(s->c[TB_CTR_DELIVERED], 990);
	assert_int_equal(s->c[TB_CTR_GAPS], 2);
	assert_int_equal(s->c[TB_CTR_MALFORMED], 1);
	assert_int_equal(s->c[TB_CTR_PUBLISHED], 0);

	seen = scan(getpid(), 0, &rc);
	assert_true(rc >= 1);
	assert_true(seen->found);
	assert_int_equal(seen->last.n_streams, 2);
	free(seen);

	/* Removing a stream hides it; its slot is reused with fresh
	 * counters. */
	tb_counters_remove_stream(a);
	tb_counters_remove_stream(NULL);
	assert_int_equal(tb_counters_read_file(path, p), 0);
	assert_int_equal(p->n_streams, 1);
	assert_null(stream_named(p, "quotes"));
	a = tb_counters_add_stream(8, "book", TB_ROLE_RECOVERY, "udp");
	assert_non_null(a);
	assert_int_equal(tb_counter_get(a, TB_CTR_PUBLISHED), 0);

	/* Close refuses while streams remain, then removes the file. */
	assert_int_equal(tb_counters_close(), TB_EBUSY);
	assert_true(exists(path));
	tb_counters_remove_stream(a);
	tb_counters_remove_stream(b);
	assert_int_equal(tb_counters_close(), 0);
	assert_false(exists(path));
	assert_string_equal(tb_counters_path(), "");
	assert_int_equal(tb_counters_close(), 0);
	free(p);
}

static void test_slots_run_out_and_names_truncate(void **state)
{
	(void)state;
	tb_counter_slot_t *slots[TB_COUNTERS_SLOTS], own;
	tb_counters_proc_t *p = malloc(sizeof(*p));
	char longname[200];

	assert_non_null(p);
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	for (int i = 0; i < TB_COUNTERS_SLOTS; i++) {
		slots[i] = tb_counters_add_stream((uint32_t)i, longname,
						  TB_ROLE_SUBSCRIBER,
						  "a-very-long-transport-name");
		assert_non_null(slots[i]);
	}
	assert_null(tb_counters_add_stream(99, "x", TB_ROLE_PUBLISHER, "shm"));
	assert_non_null(strstr(tb_errmsg(), "slots"));
	/* take_stream falls back to the caller's own slot, which remove
	 * then ignores. */
	memset(&own, 0, sizeof(own));
	assert_ptr_equal(tb_counters_take_stream(&own, 99, "x",
						 TB_ROLE_PUBLISHER, "shm"),
			 &own);
	tb_counters_remove_stream(&own);
	assert_int_equal(tb_counters_read_file(tb_counters_path(), p), 0);
	assert_int_equal(p->n_streams, TB_COUNTERS_SLOTS);
	assert_int_equal(strlen(p->streams[0].name), 63);
	assert_int_equal(strlen(p->streams[0].transport), 15);
	for (int i = 0; i < TB_COUNTERS_SLOTS; i++)
		tb_counters_remove_stream(slots[i]);

	/* Bad role. */
	assert_null(tb_counters_add_stream(1, "x", TB_ROLE_NONE, "shm"));
	assert_null(tb_counters_add_stream(1, "x", (tb_counter_role_t)9, "shm"));
	assert_int_equal(tb_counters_close(), 0);
	free(p);
}

/* ------------------------------------------------------ two processes */

static void child_writer(int ready_fd, int go_fd)
{
	tb_counter_slot_t *s;
	char c;

	s = tb_counters_add_stream(42, "child-quotes", TB_ROLE_PUBLISHER,
				   "shm");
	if (!s)
		_exit(1);
	tb_counter_add(s, TB_CTR_PUBLISHED, 1000);
	tb_counter_add(s, TB_CTR_ERRORS, 1);
	tb_counters_heartbeat();
	if (write(ready_fd, "1", 1) != 1 || read(go_fd, &c, 1) != 1)
		_exit(2);
	tb_counter_add(s, TB_CTR_PUBLISHED, 1000);
	if (write(ready_fd, "2", 1) != 1 || read(go_fd, &c, 1) != 1)
		_exit(3);
	tb_counters_remove_stream(s);
	exit(tb_counters_close() == 0 ? 0 : 4);
}

static void test_read_another_process_while_it_runs(void **state)
{
	(void)state;
	int to_parent[2], to_child[2], status, rc;
	const tb_counters_stream_t *s;
	tb_counter_slot_t *mine;
	struct seen *seen;
	char c, path[256];
	pid_t pid;

	/* The parent has a file of its own; the child must get another. */
	mine = tb_counters_add_stream(1, "parent", TB_ROLE_SUBSCRIBER, "shm");
	assert_non_null(mine);

	assert_int_equal(pipe(to_parent), 0);
	assert_int_equal(pipe(to_child), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(to_parent[0]);
		close(to_child[1]);
		child_writer(to_parent[1], to_child[0]);
	}
	close(to_parent[1]);
	close(to_child[0]);
	path_for_pid(path, sizeof(path), pid);

	assert_int_equal(read(to_parent[0], &c, 1), 1);
	seen = scan(pid, 0, &rc);
	assert_int_equal(rc, 2); /* the parent and the child */
	assert_true(seen->found);
	assert_int_equal(seen->last.n_streams, 1);
	s = stream_named(&seen->last, "child-quotes");
	assert_non_null(s);
	assert_int_equal(s->stream_id, 42);
	assert_int_equal(s->c[TB_CTR_PUBLISHED], 1000);
	assert_int_equal(s->c[TB_CTR_ERRORS], 1);
	assert_true(seen->last.heartbeat_ns > 0);
	assert_null(stream_named(&seen->last, "parent"));
	free(seen);

	assert_int_equal(write(to_child[1], "g", 1), 1);
	assert_int_equal(read(to_parent[0], &c, 1), 1);
	seen = scan(pid, 0, &rc);
	assert_true(seen->found);
	assert_int_equal(stream_named(&seen->last, "child-quotes")
				 ->c[TB_CTR_PUBLISHED],
			 2000);
	free(seen);

	assert_int_equal(write(to_child[1], "g", 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_false(exists(path)); /* the child's close removed it */
	close(to_parent[0]);
	close(to_child[1]);

	tb_counters_remove_stream(mine);
	assert_int_equal(tb_counters_close(), 0);
}

/* A process that dies without closing leaves its file; readers skip it and
 * delete it when asked. */
static void test_dead_process_is_skipped_and_deleted(void **state)
{
	(void)state;
	char path[256];
	struct seen *seen;
	int status, rc;
	pid_t pid;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		tb_counter_slot_t *s = tb_counters_add_stream(
			5, "doomed", TB_ROLE_SUBSCRIBER, "udp");

		if (!s)
			_exit(1);
		tb_counter_inc(s, TB_CTR_DELIVERED);
		_exit(0); /* no exit handlers: the file stays */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(WEXITSTATUS(status), 0);
	path_for_pid(path, sizeof(path), pid);
	assert_true(exists(path));
	assert_int_equal(kill(pid, 0), -1);

	seen = scan(pid, 0, &rc);
	assert_int_equal(rc, 0);
	assert_false(seen->found);
	free(seen);
	assert_true(exists(path));

	seen = scan(pid, TB_COUNTERS_DELETE_STALE, &rc);
	assert_int_equal(rc, 0);
	free(seen);
	assert_false(exists(path));
}

static void *read_whole(const char *path, size_t *len)
{
	struct stat st;
	void *buf;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size + 1);
	assert_non_null(buf);
	assert_int_equal(read(fd, buf, (size_t)st.st_size), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static void write_whole(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* A live pid whose process started at another time than the file says is
 * a reused pid: stale. */
static void test_reused_pid_is_stale(void **state)
{
	(void)state;
	tb_counter_slot_t *s;
	unsigned char *img;
	char path[256];
	struct seen *seen;
	/* pid 1 is alive and started long before this process: a file that
	 * claims it with our start time is a reused pid.  (Our parent would
	 * not do: it may have started within the same clock tick.) */
	pid_t other = 1;
	int32_t pid32 = (int32_t)other;
	size_t len;
	int rc;

	s = tb_counters_add_stream(3, "mine", TB_ROLE_PUBLISHER, "shm");
	assert_non_null(s);
	img = read_whole(tb_counters_path(), &len);
	memcpy(img + offsetof(tb_counters_hdr_t, pid), &pid32, 4);
	path_for_pid(path, sizeof(path), other);
	write_whole(path, img, len);

	seen = scan(other, TB_COUNTERS_DELETE_STALE, &rc);
	assert_false(seen->found);
	assert_true(seen->n >= 1); /* ours is still reported */
	free(seen);
	assert_false(exists(path));

	/* A file whose header pid disagrees with its name is skipped (and
	 * kept: its named process lives). */
	path_for_pid(path, sizeof(path), other);
	pid32 = (int32_t)getpid();
	memcpy(img + offsetof(tb_counters_hdr_t, pid), &pid32, 4);
	write_whole(path, img, len);
	seen = scan(other, TB_COUNTERS_DELETE_STALE, &rc);
	assert_false(seen->found);
	free(seen);
	assert_true(exists(path));
	unlink(path);

	free(img);
	tb_counters_remove_stream(s);
	assert_int_equal(tb_counters_close(), 0);
}

/* Truncated, corrupt and foreign files never crash a reader, and never
 * reach the callback. */
static void test_corrupt_files(void **state)
{
	(void)state;
	tb_counters_proc_t *p = malloc(sizeof(*p));
	unsigned char *good, *bad;
	tb_counter_slot_t *s;
	pid_t live = getppid();
	char path[256];
	struct seen *seen;
	size_t len;
	int rc;

	assert_non_null(p);
	s = tb_counters_add_stream(3, "good", TB_ROLE_PUBLISHER, "shm");
	assert_non_null(s);
	good = read_whole(tb_counters_path(), &len);
	bad = malloc(len + 64);
	assert_non_null(bad);
	path_for_pid(path, sizeof(path), live);

#define EXPECT_BAD(bytes, n)                                              \
	do {                                                              \
		write_whole(path, (bytes), (n));                          \
		assert_int_equal(tb_counters_read_file(path, p),          \
				 TB_EFORMAT);                             \
		seen = scan(live, 0, &rc);                                \
		assert_false(seen->found);                                \
		assert_true(seen->found == 0 && rc >= 1);                 \
		free(seen);                                               \
	} while (0)

	EXPECT_BAD(good, 0);                   /* empty */
	EXPECT_BAD(good, 5);                   /* before the version */
	EXPECT_BAD(good, 64);                  /* half a header */
	EXPECT_BAD(good, sizeof(tb_counters_hdr_t)); /* header only */
	EXPECT_BAD(good, len - 100);           /* torn last slot */
	memcpy(bad, good, len);
	memset(bad + len, 0, 64);
	EXPECT_BAD(bad, len + 64);             /* too long */
	memset(bad, 0xff, len);
	EXPECT_BAD(bad, len);                  /* garbage */
	memset(bad, 0, len);
	EXPECT_BAD(bad, len);                  /* zeros: version 0 */

	memcpy(bad, good, len);
	bad[offsetof(tb_counters_hdr_t, version)] = TB_COUNTERS_VERSION + 1;
	EXPECT_BAD(bad, len);                  /* another version */
	memcpy(bad, good, len);
	bad[0] ^= 1;
	EXPECT_BAD(bad, len);                  /* magic */
	memcpy(bad, good, len);
	bad[offsetof(tb_counters_hdr_t, slot_size)] ^= 0x40;
	EXPECT_BAD(bad, len);                  /* slot size */
	memcpy(bad, good, len);
	memset(bad + offsetof(tb_counters_hdr_t, n_slots), 0xff, 4);
	EXPECT_BAD(bad, len);                  /* 4 billion slots */
	memcpy(bad, good, len);
	memset(bad + offsetof(tb_counters_hdr_t, n_slots), 0, 4);
	EXPECT_BAD(bad, len);                  /* no slots */
	memcpy(bad, good, len);
	bad[offsetof(tb_counters_hdr_t, n_slots)] = TB_COUNTERS_SLOTS + 1;
	EXPECT_BAD(bad, len);                  /* more slots than bytes */
	memcpy(bad, good, len);
	bad[offsetof(tb_counters_hdr_t, n_counters)] = 200;
	EXPECT_BAD(bad, len);                  /* too many counters */

	/* Strings without a NUL are cut, not overrun. */
	memcpy(bad, good, len);
	memset(bad + offsetof(tb_counters_hdr_t, name), 'A', 64);
	for (int i = 0; i < TB_COUNTERS_SLOTS; i++) {
		unsigned char *sl = bad + sizeof(tb_counters_hdr_t) +
				    (size_t)i * sizeof(tb_counter_slot_t);

		memset(sl + offsetof(tb_counter_slot_t, stream_name), 'B', 64);
		memset(sl + offsetof(tb_counter_slot_t, transport), 'C', 16);
	}
	write_whole(path, bad, len);
	assert_int_equal(tb_counters_read_file(path, p), 0);
	assert_int_equal(strlen(p->name), 63);
	assert_int_equal(p->n_streams, 1);
	assert_int_equal(strlen(p->streams[0].name), 63);
	assert_int_equal(strlen(p->streams[0].transport), 15);
	unlink(path);

	/* A directory, a symlink and a FIFO under a counters name. */
	assert_int_equal(mkdir(path, 0700), 0);
	assert_true(tb_counters_read_file(path, p) < 0);
	seen = scan(live, 0, &rc);
	assert_false(seen->found);
	free(seen);
	rmdir(path);
	assert_int_equal(symlink(tb_counters_path(), path), 0);
	assert_true(tb_counters_read_file(path, p) < 0);
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(tb_counters_read_file(path, p), TB_EFORMAT);
	seen = scan(live, 0, &rc);
	assert_false(seen->found);
	free(seen);
	unlink(path);

	/* Names that are not "<prefix><pid>" are ignored. */
	{
		static const char *const names[] = { "", "12a", "-5", "0",
						     "99999999999" };
		char odd[256];

		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			path_for(odd, sizeof(odd), names[i]);
			write_whole(odd, good, len);
		}
		seen = scan(getpid(), TB_COUNTERS_DELETE_STALE, &rc);
		assert_int_equal(rc, 1); /* only ours */
		assert_true(seen->found);
		free(seen);
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			path_for(odd, sizeof(odd), names[i]);
			assert_true(exists(odd)); /* untouched */
			unlink(odd);
		}
	}

	free(good);
	free(bad);
	tb_counters_remove_stream(s);
	assert_int_equal(tb_counters_close(), 0);
	free(p);
}

/* ------------------------------------------- memory registrations */

static const tb_counters_mr_t *mr_at(const tb_counters_proc_t *p,
				     uint64_t addr)
{
	for (int i = 0; i < p->n_mrs; i++)
		if (p->mrs[i].addr == addr)
			return &p->mrs[i];
	return NULL;
}

static void test_memory_registrations(void **state)
{
	(void)state;
	tb_counters_proc_t *p = malloc(sizeof(*p));
	static char ring[4096], slot[64];
	tb_counter_mr_t *a, *b, *more[TB_COUNTERS_MRS];
	const tb_counters_mr_t *m;
	char buf[96];
	int n;

	assert_non_null(p);
	a = tb_counters_mr_add_raw(4, TB_ROLE_SUBSCRIBER, TB_MR_RING_RX, "rc",
				   ring, sizeof(ring),
				   TB_MR_LOCAL_WRITE | TB_MR_REMOTE_WRITE,
				   0x1111, 0x2222);
	b = tb_counters_mr_add_raw(4, TB_ROLE_PUBLISHER, TB_MR_CREDIT, "rc",
				   slot, sizeof(slot), TB_MR_REMOTE_WRITE, 0x33,
				   0x44);
	assert_non_null(a);
	assert_non_null(b);
	tb_counters_mr_peer(a, "10.0.0.7:4000 qpn 0x12");
	tb_counters_mr_peer(a, "10.0.0.8:4000 qpn 0x13");
	tb_counters_mr_peer(NULL, "nobody"); /* a no-op */
	assert_int_equal(tb_counters_read_file(tb_counters_path(), p), 0);
	assert_int_equal(p->n_mrs, 2);
	m = mr_at(p, (uint64_t)(uintptr_t)ring);
	assert_non_null(m);
	assert_int_equal(m->stream_id, 4);
	assert_int_equal(m->role, TB_ROLE_SUBSCRIBER);
	assert_int_equal(m->use, TB_MR_RING_RX);
	assert_int_equal(m->length, sizeof(ring));
	assert_int_equal(m->access, TB_MR_LOCAL_WRITE | TB_MR_REMOTE_WRITE);
	assert_int_equal(m->lkey, 0x1111);
	assert_int_equal(m->rkey, 0x2222);
	assert_int_equal(m->n_peers, 2);
	assert_string_equal(m->peer, "10.0.0.8:4000 qpn 0x13");
	assert_string_equal(m->transport, "rc");
	m = mr_at(p, (uint64_t)(uintptr_t)slot);
	assert_non_null(m);
	assert_int_equal(m->use, TB_MR_CREDIT);
	assert_int_equal(m->n_peers, 0);

	/* Removed records disappear; a closed file waits for them. */
	tb_counters_mr_remove(b);
	tb_counters_mr_remove(NULL);
	assert_int_equal(tb_counters_read_file(tb_counters_path(), p), 0);
	assert_int_equal(p->n_mrs, 1);
	assert_int_equal(tb_counters_close(), TB_EBUSY);

	/* Full: NULL, and NULL is accepted everywhere. */
	for (n = 0; n < TB_COUNTERS_MRS - 1; n++) {
		more[n] = tb_counters_mr_add_raw(1, TB_ROLE_PUBLISHER,
						 TB_MR_SEND, "ud", slot, 1, 0,
						 1, 2);
		assert_non_null(more[n]);
	}
	assert_null(tb_counters_mr_add_raw(1, TB_ROLE_PUBLISHER, TB_MR_SEND,
					   "ud", slot, 1, 0, 1, 2));
	for (n = 0; n < TB_COUNTERS_MRS - 1; n++)
		tb_counters_mr_remove(more[n]);
	tb_counters_mr_remove(a);
	tb_counters_mr_remove(a); /* twice: a no-op */
	assert_int_equal(tb_counters_close(), 0);

	assert_string_equal(tb_mr_access_str(0, buf, sizeof(buf)), "none");
	assert_string_equal(tb_mr_access_str(TB_MR_LOCAL_WRITE |
					     TB_MR_REMOTE_READ | 0x400,
					     buf, sizeof(buf)),
			    "LOCAL_WRITE|REMOTE_READ|0x400");
	assert_string_equal(tb_mr_use_name(TB_MR_RING_RX), "ring_rx");
	assert_string_equal(tb_mr_use_name(99), "?");
	free(p);
}

/* ------------------------------------------------------ histograms */

static void test_histograms(void **state)
{
	(void)state;
	tb_counters_proc_t *p = malloc(sizeof(*p));
	tb_counter_hist_t *h, *all[TB_COUNTERS_HISTS];
	const tb_counters_hist_t *c;

	assert_non_null(p);
	/* Bucket i holds values up to 2^(i+6) ns, the last one the rest. */
	assert_int_equal(tb_counter_hist_bucket(-5), 0);
	assert_int_equal(tb_counter_hist_bucket(0), 0);
	assert_int_equal(tb_counter_hist_bucket(64), 0);
	assert_int_equal(tb_counter_hist_bucket(65), 1);
	assert_int_equal(tb_counter_hist_bucket(128), 1);
	assert_int_equal(tb_counter_hist_bucket(129), 2);
	assert_int_equal(tb_counter_hist_bucket(1000), 4); /* <= 1024 */
	assert_int_equal(tb_counter_hist_bucket(1ll << 36), 30);
	assert_int_equal(tb_counter_hist_bucket((1ll << 36) + 1), 31);
	assert_int_equal(tb_counter_hist_bucket(INT64_MAX), 31);
	assert_int_equal(tb_counter_hist_le_ns(4), 1024);

	h = tb_counters_hist_add(9, TB_ROLE_SUBSCRIBER, "Delivery-Latency");
	assert_non_null(h);
	tb_counter_hist_record(h, 50);
	tb_counter_hist_record(h, 1000);
	tb_counter_hist_record(h, 1000);
	tb_counter_hist_record(h, -3);
	tb_counter_hist_record(h, 100000000000ll);
	tb_counter_hist_record(NULL, 5); /* a no-op */
	assert_int_equal(tb_counters_read_file(tb_counters_path(), p), 0);
	assert_int_equal(p->n_hists, 1);
	c = &p->hists[0];
	assert_string_equal(c->name, "delivery_latency");
	assert_int_equal(c->stream_id, 9);
	assert_int_equal(c->role, TB_ROLE_SUBSCRIBER);
	assert_int_equal(c->count, 5);
	assert_int_equal(c->b[0], 2);
	assert_int_equal(c->b[4], 2);
	assert_int_equal(c->b[31], 1);
	assert_int_equal(c->sum_ns, 50 + 2000 + 100000000000ull);

	for (int i = 0; i < TB_COUNTERS_HISTS - 1; i++) {
		all[i] = tb_counters_hist_add(0, TB_ROLE_NONE, "x");
		assert_non_null(all[i]);
	}
	assert_null(tb_counters_hist_add(0, TB_ROLE_NONE, "one too many"));
	for (int i = 0; i < TB_COUNTERS_HISTS - 1; i++)
		tb_counters_hist_remove(all[i]);
	tb_counters_hist_remove(h);
	tb_counters_hist_remove(NULL);
	assert_int_equal(tb_counters_close(), 0);
	free(p);
}

/* ------------------------------------------- who may read, who creates */

/* The file is created 0640 whatever the umask (or as $TICKBUS_COUNTERS_
 * MODE says, within owner rw and group r), never world-readable. */
static void test_file_mode(void **state)
{
	(void)state;
	tb_counter_slot_t *s;
	mode_t old = umask(0);
	struct stat st;

	s = tb_counters_add_stream(1, "m", TB_ROLE_PUBLISHER, "shm");
	umask(old);
	assert_non_null(s);
	assert_int_equal(stat(tb_counters_path(), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	tb_counters_remove_stream(s);
	assert_int_equal(tb_counters_close(), 0);

	setenv("TICKBUS_COUNTERS_MODE", "600", 1);
	s = tb_counters_add_stream(1, "m", TB_ROLE_PUBLISHER, "shm");
	assert_non_null(s);
	assert_int_equal(stat(tb_counters_path(), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	tb_counters_remove_stream(s);
	assert_int_equal(tb_counters_close(), 0);

	/* World-readable, executable or nonsense: refused, the default. */
	static const char *const bad[] = {"644", "0604", "700", "9", "", "x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("TICKBUS_COUNTERS_MODE", bad[i], 1);
		s = tb_counters_add_stream(1, "m", TB_ROLE_PUBLISHER, "shm");
		assert_non_null(s);
		assert_int_equal(stat(tb_counters_path(), &st), 0);
		assert_int_equal(st.st_mode & 07777, 0640);
		tb_counters_remove_stream(s);
		assert_int_equal(tb_counters_close(), 0);
	}
	unsetenv("TICKBUS_COUNTERS_MODE");
}

/* What lies at a process's path before it creates its file: its own
 * leftover (a dead process with the same pid) is replaced; a link, a FIFO
 * or another user's file is refused and left alone. */
static void test_squatted_path(void **state)
{
	(void)state;
	char path[256], target[256];
	int to_child[2], from_child[2], status;
	struct stat st;
	pid_t pid;
	char c;

	for (int kind = 0; kind < 4; kind++) {
		assert_int_equal(pipe(to_child), 0);
		assert_int_equal(pipe(from_child), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			int rc;

			if (read(to_child[0], &c, 1) != 1)
				_exit(10);
			rc = tb_counters_open();
			c = rc == 0 ? 'o' : rc == TB_EBUSY ? 'b' : 'e';
			if (write(from_child[1], &c, 1) != 1)
				_exit(11);
			_exit(0);
		}
		path_for_pid(path, sizeof(path), pid);
		snprintf(target, sizeof(target), "%s/target-%d", dir, kind);
		write_whole(target, "precious", 8);
		switch (kind) {
		case 0: write_whole(path, "leftover", 8); break;
		case 1: assert_int_equal(symlink(target, path), 0); break;
		case 2: assert_int_equal(mkfifo(path, 0666), 0); break;
		case 3:
			write_whole(path, "squatter", 8);
			if (geteuid() != 0 || chown(path, 4242, 4242) != 0) {
				/* Not root: another user's file cannot be
				 * made here; the check is root's case. */
				unlink(path);
				write_whole(path, "leftover", 8);
				kind = 4;
			}
			break;
		}
		assert_int_equal(write(to_child[1], "g", 1), 1);
		assert_int_equal(read(from_child[0], &c, 1), 1);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (kind == 0 || kind == 4) {
			assert_int_equal(c, 'o'); /* replaced by a real file */
			assert_int_equal(lstat(path, &st), 0);
			assert_true(S_ISREG(st.st_mode));
			assert_true(st.st_size > 8);
		} else {
			assert_int_equal(c, 'b'); /* refused, left alone */
			assert_int_equal(lstat(path, &st), 0);
			if (kind == 1)
				assert_true(S_ISLNK(st.st_mode));
			if (kind == 2)
				assert_true(S_ISFIFO(st.st_mode));
			if (kind == 3)
				assert_int_equal(st.st_uid, 4242);
		}
		assert_int_equal(stat(target, &st), 0);
		assert_int_equal(st.st_size, 8); /* never written through */
		unlink(path);
		unlink(target);
		close(to_child[0]);
		close(to_child[1]);
		close(from_child[0]);
		close(from_child[1]);
	}
}

/* read_dir_reap counts the stale files it removes.  Both writers live
 * until both files are made: a new file sweeps the stale ones already
 * there (test_new_file_sweeps_stale_ones). */
static void test_reap_counts(void **state)
{
	(void)state;
	int rc, reaped = -1, status, made[2];
	struct seen s = {0};
	char path[256], byte;
	pid_t pid[2];

	assert_int_equal(pipe(made), 0);
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			if (!tb_counters_add_stream(5, "doomed",
						    TB_ROLE_SUBSCRIBER, "udp"))
				_exit(1);
			if (write(made[1], "x", 1) != 1)
				_exit(1);
			pause();
			_exit(2);
		}
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(read(made[0], &byte, 1), 1);
	for (int i = 0; i < 2; i++) {
		kill(pid[i], SIGKILL);
		assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
		assert_true(WIFSIGNALED(status));
		path_for_pid(path, sizeof(path), pid[i]);
		assert_true(exists(path));
	}
	close(made[0]);
	close(made[1]);
	rc = tb_counters_read_dir_reap(NULL, 0, collect, &s, &reaped);
	assert_true(rc >= 0);
	assert_int_equal(reaped, 0);
	rc = tb_counters_read_dir_reap(NULL, TB_COUNTERS_DELETE_STALE, collect,
				       &s, &reaped);
	assert_true(rc >= 0);
	assert_int_equal(reaped, 2);
	assert_false(exists(path));
}

/* A pid that is gone: a child that exits at once, waited for. */
static pid_t dead_pid(void)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return pid;
}

/* Makes `path` look a minute old: the sweep leaves younger files alone
 * (a writer locks its file just after it creates it). */
static void age(const char *path)
{
	struct timespec t[2];

	assert_int_equal(clock_gettime(CLOCK_REALTIME, &t[0]), 0);
	t[0].tv_sec -= 60;
	t[1] = t[0];
	assert_int_equal(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

/* Runs a child that makes its counters file (and so sweeps), then exits
 * the normal way (its own file goes with it). */
static void child_makes_its_file(void)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		exit(tb_counters_add_stream(6, "sweeper", TB_ROLE_PUBLISHER,
					    "shm") ? 0 : 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* A process that makes its counters file removes the files of processes
 * that are gone (a crash, _exit: no atexit) once they are 2 s old.  It
 * keeps a fresh one, and a file whose lock is held (a live writer in
 * another pid namespace holds it, though kill() says its pid is gone
 * here), and anything that is not a regular file (a link, a fifo).  A
 * reader's reaping keeps a held file too.  Once the lock is let go, the
 * next new file sweeps that one as well. */
static void test_new_file_sweeps_stale_ones(void **state)
{
	(void)state;
	char crashed[256], held[256], link[256], fifo[256];
	int status, fd, rc, reaped;
	struct seen s = {0};
	pid_t pid;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (!tb_counters_add_stream(5, "crashes", TB_ROLE_SUBSCRIBER,
					    "udp"))
			_exit(1);
		_exit(0); /* no exit handlers: the file stays */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(WEXITSTATUS(status), 0);
	path_for_pid(crashed, sizeof(crashed), pid);
	assert_true(exists(crashed));
	/* Just made: too young to sweep, whatever else holds. */
	child_makes_its_file();
	assert_true(exists(crashed));
	age(crashed);

	path_for_pid(held, sizeof(held), dead_pid());
	fd = open(held, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_SH), 0);
	age(held);
	path_for_pid(link, sizeof(link), dead_pid());
	assert_int_equal(symlink(held, link), 0);
	age(link);
	path_for_pid(fifo, sizeof(fifo), dead_pid());
	assert_int_equal(mkfifo(fifo, 0600), 0);
	age(fifo);

	child_makes_its_file();
	assert_false(exists(crashed));
	assert_true(exists(held));
	assert_true(exists(link));
	assert_true(exists(fifo));
	child_makes_its_file();
	assert_true(exists(link));
	assert_true(exists(fifo));
	assert_int_equal(unlink(link), 0);
	assert_int_equal(unlink(fifo), 0);
	/* A reader's reaping (tb-stat's) keeps a held file too. */
	rc = tb_counters_read_dir_reap(NULL, TB_COUNTERS_DELETE_STALE, collect,
				       &s, &reaped);
	assert_true(rc >= 0);
	assert_true(exists(held));

	close(fd); /* the "writer" is gone now */
	child_makes_its_file();
	assert_false(exists(held));
}

static void test_reader_bad_args(void **state)
{
	(void)state;
	tb_counters_proc_t *p = malloc(sizeof(*p));

	assert_non_null(p);
	assert_int_equal(tb_counters_read_dir(NULL, 0, NULL, NULL), TB_EINVAL);
	assert_int_equal(tb_counters_read_dir("/nonexistent-tb-dir", 0,
					      collect, NULL),
			 TB_ENOENT);
	assert_int_equal(tb_counters_read_file(NULL, p), TB_EINVAL);
	assert_int_equal(tb_counters_read_file("/nonexistent-tb-file", p),
			 TB_ENOENT);
	assert_string_equal(tb_counter_name(TB_CTR_RECOVERY_OK), "recovery_ok");
	assert_string_equal(tb_counter_name(TB_CTR_COUNT), "?");
	assert_string_equal(tb_counter_name(-1), "?");
	assert_string_equal(tb_counter_role_name(TB_ROLE_RECOVERY), "recovery");
	assert_string_equal(tb_counter_role_name(0), "?");
	free(p);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/dev/shm/tbtest-counters-%d",
		 (int)getpid());
	if (mkdir(dir, 0700) != 0)
		return -1;
	setenv("TICKBUS_COUNTERS_DIR", dir, 1);
	return 0;
}

static int teardown(void **state)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[512];

	(void)state;
	tb_counters_close();
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (unlink(path) != 0)
			rmdir(path);
	}
	if (d)
		closedir(d);
	return rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_and_read_back),
		cmocka_unit_test(test_slots_run_out_and_names_truncate),
		cmocka_unit_test(test_read_another_process_while_it_runs),
		cmocka_unit_test(test_dead_process_is_skipped_and_deleted),
		cmocka_unit_test(test_reused_pid_is_stale),
		cmocka_unit_test(test_corrupt_files),
		cmocka_unit_test(test_memory_registrations),
		cmocka_unit_test(test_histograms),
		cmocka_unit_test(test_file_mode),
		cmocka_unit_test(test_squatted_path),
		cmocka_unit_test(test_reap_counts),
		cmocka_unit_test(test_new_file_sweeps_stale_ones),
		cmocka_unit_test(test_reader_bad_args),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
