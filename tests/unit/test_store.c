/* The retransmit store: round trips, read cost, refusals, crash repair,
 * corruption, retention, epochs, and a real crash by SIGKILL. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/recovery/store.h"

#include "bus/crc32c.h"
#include "bus/error.h"
#include "tests/common/rng.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STREAM 7
#define EPOCH ((uint64_t)0x5eed)
#define HDR 64          /* segment and index header bytes */
#define IDX_ENT 16
#define INTERVAL TB_STORE_INDEX_INTERVAL
#define MAX_PAYLOAD 65536

static char tmp[64];    /* this test's directory, removed at teardown */
static char root[128];  /* cfg.dir */
static uint8_t fbuf[MAX_PAYLOAD + 64] __attribute__((aligned(8)));

/* -------------------------------------------------------------- helpers */

static uint32_t plen_default(uint64_t seq) { return 16 + (uint32_t)(seq * 37 % 200); }
static uint32_t (*plen)(uint64_t seq) = plen_default;

static uint8_t pattern(uint64_t seq, uint32_t i)
{
	return (uint8_t)(seq * 131 + i * 7 + (seq >> 8));
}

static const tb_frame_hdr_t *frame(uint64_t seq)
{
	tb_frame_hdr_t *f = (tb_frame_hdr_t *)fbuf;
	uint32_t n = plen(seq), i;

	tb_frame_init(f, n, 3, STREAM, seq, seq * 1000);
	for (i = 0; i < n; i++)
		fbuf[TB_FRAME_HDR_LEN + i] = pattern(seq, i);
	return f;
}

static uint32_t rec_bytes(uint64_t seq)
{
	return 8 + ((TB_FRAME_HDR_LEN + plen(seq) + 7) & ~7u);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st; (void)flag; (void)f;
	return remove(p);
}

static int setup(void **state)
{
	(void)state;
	strcpy(tmp, "/tmp/tb_store_test.XXXXXX");
	if (!mkdtemp(tmp))
		return -1;
	snprintf(root, sizeof(root), "%s/store", tmp);
	plen = plen_default;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return nftw(tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void cfg_make(tb_store_cfg_t *c, uint64_t epoch, uint64_t seg_bytes)
{
	tb_store_cfg_init(c);
	snprintf(c->dir, sizeof(c->dir), "%s", root);
	c->stream_id = STREAM;
	c->epoch = epoch;
	c->segment_bytes = seg_bytes;
}

static tb_store_t *open_ok(uint64_t epoch, uint64_t seg_bytes)
{
	tb_store_cfg_t c;
	tb_store_t *s = NULL;

	cfg_make(&c, epoch, seg_bytes);
	if (tb_store_open(&s, &c) != 0)
		fail_msg("tb_store_open: %s", tb_errmsg());
	return s;
}

static void append_range(tb_store_t *s, uint64_t from, uint64_t to)
{
	for (uint64_t q = from; q <= to; q++)
		if (tb_store_append(s, frame(q)) != 0)
			fail_msg("append %" PRIu64 ": %s", q, tb_errmsg());
}

static void path_of(char *out, size_t len, uint64_t epoch, uint64_t first,
		    const char *ext)
{
	snprintf(out, len, "%s/%u-%016" PRIx64 "/%020" PRIu64 ".%s", root,
		 STREAM, epoch, first, ext);
}

static int cmp64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* First sequences of the segment files on disk, ascending. */
static int seg_firsts(uint64_t epoch, uint64_t *out, int max)
{
	char d[400];
	struct dirent *de;
	DIR *dp;
	int n = 0;

	snprintf(d, sizeof(d), "%s/%u-%016" PRIx64, root, STREAM, epoch);
	dp = opendir(d);
	assert_non_null(dp);
	while ((de = readdir(dp)))
		if (strstr(de->d_name, ".seg") && n < max)
			out[n++] = strtoull(de->d_name, NULL, 10);
	closedir(dp);
	qsort(out, (size_t)n, sizeof(*out), cmp64);
	return n;
}

static off_t file_size(const char *p)
{
	struct stat st;

	assert_int_equal(stat(p, &st), 0);
	return st.st_size;
}

static uint8_t *slurp(const char *p, size_t *len)
{
	FILE *f = fopen(p, "rb");
	uint8_t *b;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc(*len + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, *len, f), *len);
	fclose(f);
	return b;
}

static void spit(const char *p, const uint8_t *b, size_t len)
{
	FILE *f = fopen(p, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, len, f), len);
	fclose(f);
}

static void patch(const char *p, off_t off, const void *b, size_t len)
{
	int fd = open(p, O_WRONLY);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, b, len, off), (ssize_t)len);
	close(fd);
}

static void flip(const char *p, off_t off)
{
	int fd = open(p, O_RDWR);
	uint8_t b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

/* Offset of the record holding `seq` in a segment starting at `first`. */
static off_t rec_offset(uint64_t first, uint64_t seq)
{
	off_t off = HDR;

	for (uint64_t q = first; q < seq; q++)
		off += rec_bytes(q);
	return off;
}

/* Checks frames as they arrive: contiguous from `next`, intact. */
typedef struct check {
	uint64_t next;
	int n;
	int stop_after;
} check_t;

static int on_frame(void *clientd, const tb_frame_hdr_t *f)
{
	check_t *c = clientd;
	const uint8_t *p = (const uint8_t *)f + TB_FRAME_HDR_LEN;
	uint32_t i, n = plen(f->seq);

	assert_int_equal(f->seq, c->next);
	assert_int_equal(f->length, TB_FRAME_HDR_LEN + n);
	assert_int_equal(f->stream_id, STREAM);
	assert_int_equal(f->publish_ns, f->seq * 1000);
	assert_int_equal((uintptr_t)f % 8, 0);
	for (i = 0; i < n; i++)
		if (p[i] != pattern(f->seq, i))
			fail_msg("seq %" PRIu64 " byte %u differs", f->seq, i);
	c->next++;
	c->n++;
	return c->stop_after && c->n >= c->stop_after;
}

/* Reads [from, to] in calls of `step`, checking everything. */
static void read_all(tb_store_t *s, uint64_t from, uint64_t to, int step)
{
	check_t c = {from, 0, 0};

	while (c.next <= to) {
		uint64_t want = to - c.next + 1;
		int r = tb_store_read(s, c.next, want < (uint64_t)step ? (int)want : step,
				      on_frame, &c);

		if (r <= 0)
			fail_msg("read at %" PRIu64 ": %d %s", c.next, r, tb_errmsg());
	}
	assert_int_equal(c.next, to + 1);
}

static uint64_t stat_of(tb_store_t *s, size_t field_off)
{
	tb_store_stats_t st;

	tb_store_stats(s, &st);
	return *(uint64_t *)((uint8_t *)&st + field_off);
}
#define STAT(s, f) stat_of((s), offsetof(tb_store_stats_t, f))

/* -------------------------------------------------------- round trips */

static void round_trip_across_many_segments(void **state)
{
	tb_store_t *s = open_ok(EPOCH, 4096);
	uint64_t firsts[256];
	int n;

	(void)state;
	assert_int_equal(tb_store_first_seq(s), 0);
	assert_int_equal(tb_store_last_seq(s), 0);
	append_range(s, 1, 2000);
	assert_int_equal(tb_store_first_seq(s), 1);
	assert_int_equal(tb_store_last_seq(s), 2000);
	assert_true(STAT(s, segments) > 20);
	read_all(s, 1, 2000, 100000);
	read_all(s, 1, 2000, 7);
	read_all(s, 1234, 2000, 1);
	n = seg_firsts(EPOCH, firsts, 256);
	assert_int_equal(n, (int)STAT(s, segments));
	/* Every segment but the last is full: the next record did not fit. */
	for (int i = 0; i + 1 < n; i++) {
		char p[512];
		off_t sz;

		path_of(p, sizeof(p), EPOCH, firsts[i], "seg");
		sz = file_size(p);
		assert_int_equal(sz, rec_offset(firsts[i], firsts[i + 1]));
		assert_true(sz <= 4096);
		assert_true(sz + rec_bytes(firsts[i + 1]) > 4096);
	}
	assert_int_equal(tb_store_close(s), 0);

	s = open_ok(EPOCH, 4096);
	assert_int_equal(tb_store_first_seq(s), 1);
	assert_int_equal(tb_store_last_seq(s), 2000);
	read_all(s, 1, 2000, 333);
	tb_store_close(s);
}

static void reads_at_segment_boundaries(void **state)
{
	tb_store_t *s = open_ok(EPOCH, 2048);
	uint64_t firsts[512];
	int n;

	(void)state;
	append_range(s, 1, 600);
	n = seg_firsts(EPOCH, firsts, 512);
	assert_true(n > 10);
	for (int i = 1; i < n; i++) {
		uint64_t f = firsts[i];

		read_all(s, f - 1, f, 2);       /* straddles the boundary */
		read_all(s, f, f, 1);           /* first of a segment */
		read_all(s, f - 1, f - 1, 1);   /* last of the previous */
		read_all(s, f - 2, f + 2, 100);
	}
	read_all(s, 600, 600, 1);
	tb_store_close(s);
}

static int stop_cb(void *clientd, const tb_frame_hdr_t *f)
{
	return on_frame(clientd, f);
}

static void read_stops_when_the_callback_says(void **state)
{
	tb_store_t *s = open_ok(EPOCH, 4096);
	check_t c = {10, 0, 3};

	(void)state;
	append_range(s, 1, 100);
	assert_int_equal(tb_store_read(s, 10, 50, stop_cb, &c), 3);
	assert_int_equal(c.next, 13);
	tb_store_close(s);
}

static uint32_t plen_fixed64(uint64_t seq)
{
	(void)seq;
	return 64;
}

static void read_cost_is_a_seek_not_a_scan(void **state)
{
	tb_store_t *s;
	const uint64_t n = 60000;
	/* Records are 8 + 32 + 64 = 104 bytes. */
	const uint64_t per_interval = INTERVAL / 104 + 2;

	(void)state;
	plen = plen_fixed64;
	s = open_ok(EPOCH, 1 << 20);
	append_range(s, 1, n);
	assert_true(STAT(s, segments) >= 5);
	srand(7);
	for (int i = 0; i < 300; i++) {
		uint64_t q = 1 + (uint64_t)rand() % n;
		uint64_t ex0 = STAT(s, records_examined), pr0 = STAT(s, preads);

		read_all(s, q, q, 1);
		/* An index load (sealed segment, first touch) and one data
		 * read; a record straddling the chunk may cost one more. */
		assert_true(STAT(s, preads) - pr0 <= 3);
		assert_true(STAT(s, records_examined) - ex0 <= per_interval);
	}
	/* A segment holds ~10,000 records; a scan would show. */
	{
		uint64_t ex0 = STAT(s, records_examined);

		read_all(s, n, n, 1);
		assert_true(STAT(s, records_examined) - ex0 <= per_interval);
	}
	tb_store_close(s);
}

/* ------------------------------------------------------------ refusals */

static void too_old_and_not_yet_name_the_bounds(void **state)
{
	tb_store_t *s = open_ok(EPOCH, 4096);
	check_t c = {1, 0, 0};

	(void)state;
	assert_int_equal(tb_store_read(s, 1, 1, on_frame, &c), TB_STORE_NOT_YET);
	assert_non_null(strstr(tb_errmsg(), "latest is 0"));
	/* An empty store takes any first sequence. */
	append_range(s, 100, 250);
	assert_int_equal(tb_store_first_seq(s), 100);
	assert_int_equal(tb_store_last_seq(s), 250);
	assert_int_equal(tb_store_read(s, 99, 1, on_frame, &c), TB_STORE_TOO_OLD);
	assert_non_null(strstr(tb_errmsg(), "earliest available is 100"));
	assert_int_equal(tb_store_read(s, 1, 10, on_frame, &c), TB_STORE_TOO_OLD);
	assert_int_equal(tb_store_read(s, 251, 1, on_frame, &c), TB_STORE_NOT_YET);
	assert_non_null(strstr(tb_errmsg(), "latest is 250"));
	assert_int_equal(tb_store_read(s, 0, 1, on_frame, &c), TB_EINVAL);
	assert_int_equal(tb_store_read(s, 100, 0, on_frame, &c), TB_EINVAL);
	assert_int_equal(tb_store_read(s, 100, 1, NULL, &c), TB_EINVAL);
	assert_int_equal(c.n, 0);
	/* A range that runs past the end delivers what there is. */
	c.next = 240;
	assert_int_equal(tb_store_read(s, 240, 1000, on_frame, &c), 11);
	tb_store_close(s);
	assert_int_not_equal(TB_STORE_TOO_OLD, TB_STORE_NOT_YET);
}

static void out_of_order_and_duplicates_are_refused(void **state)
{
	tb_store_t *s = open_ok(EPOCH, 4096);
	tb_frame_hdr_t *f;

	(void)state;
	assert_int_equal(tb_store_append(s, frame(0)), TB_EINVAL);
	append_range(s, 1, 10);
	assert_int_equal(tb_store_append(s, frame(10)), TB_EINVAL);
	assert_non_null(strstr(tb_errmsg(), "duplicate"));
	assert_int_equal(tb_store_append(s, frame(5)), TB_EINVAL);
	assert_non_null(strstr(tb_errmsg(), "duplicate"));
	assert_int_equal(tb_store_append(s, frame(12)), TB_EINVAL);
	assert_non_null(strstr(tb_errmsg(), "out of order"));
	f = (tb_frame_hdr_t *)frame(11);
	f->stream_id = STREAM + 1;
	assert_int_equal(tb_store_append(s, f), TB_EINVAL);
	f = (tb_frame_hdr_t *)frame(11);
	f->type = TB_FRAME_PAD;
	assert_int_equal(tb_store_append(s, f), TB_EINVAL);
	f = (tb_frame_hdr_t *)frame(11);
	f->length = 8;
	assert_int_equal(tb_store_append(s, f), TB_EINVAL);
	assert_int_equal(tb_store_append(s, NULL), TB_EINVAL);
	assert_int_equal(tb_store_last_seq(s), 10);
	append_range(s, 11, 11);
	read_all(s, 1, 11, 100);

	/* A batch stops at the first frame out of order. */
	{
		static uint8_t bufs[4][512] __attribute__((aligned(8)));
		const tb_frame_hdr_t *v[4];
		uint64_t seqs[4] = {12, 13, 15, 16};

		for (int i = 0; i < 4; i++) {
			memcpy(bufs[i], frame(seqs[i]), frame(seqs[i])->length);
			v[i] = (const tb_frame_hdr_t *)bufs[i];
		}
		assert_int_equal(tb_store_append_batch(s, v, 4), 2);
		assert_int_equal(tb_store_last_seq(s), 13);
		assert_int_equal(tb_store_append_batch(s, v + 2, 2), TB_EINVAL);
		assert_int_equal(tb_store_append_batch(s, v, 0), 0);
	}
	tb_store_close(s);
}

static void batch_append_round_trips(void **state)
{
	enum { N = 3000 };
	static uint8_t *bufs[N];
	const tb_frame_hdr_t *v[N];
	tb_store_t *s = open_ok(EPOCH, 8192);
	int done = 0;

	(void)state;
	for (int i = 0; i < N; i++) {
		const tb_frame_hdr_t *f = frame((uint64_t)i + 1);

		bufs[i] = aligned_alloc(8, 512);
		memcpy(bufs[i], f, f->length);
		v[i] = (const tb_frame_hdr_t *)bufs[i];
	}
	while (done < N) {
		int r = tb_store_append_batch(s, v + done, N - done > 500 ? 500 : N - done);

		assert_true(r > 0);
		done += r;
	}
	assert_int_equal(tb_store_last_seq(s), N);
	assert_int_equal(STAT(s, appended), N);
	read_all(s, 1, N, 1000);
	tb_store_close(s);
	/* Same bytes as single appends would write: reopen finds no tail. */
	s = open_ok(EPOCH, 8192);
	assert_int_equal(tb_store_last_seq(s), N);
	read_all(s, 1, N, 1000);
	tb_store_close(s);
	for (int i = 0; i < N; i++)
		free(bufs[i]);
}

/* ------------------------------------------------------- crash repair */

static uint32_t plen_big_before_last(uint64_t seq)
{
	return seq == 39 ? 5000 : plen_default(seq);
}

/*
 * Cuts the last record at every byte, reopens, and checks the cut, the
 * index, and that appending goes on.  With `indexed_last`, record 40 is an
 * index point (the one before it is 5 KB), so the index has an entry
 * pointing at or past the end of the data to repair.
 */
static void torn_tail_at(int indexed_last)
{
	const uint64_t N = 40;
	char seg[512], idx[512];
	uint64_t firsts[64];
	uint8_t *seg_img, *idx_img;
	size_t seg_len, idx_len;
	off_t last_off;
	int n;

	plen = indexed_last ? plen_big_before_last : plen_default;
	{
		tb_store_t *s = open_ok(EPOCH, 64 << 10);

		append_range(s, 1, N);
		tb_store_close(s);
	}
	n = seg_firsts(EPOCH, firsts, 64);
	assert_int_equal(n, 1);
	path_of(seg, sizeof(seg), EPOCH, 1, "seg");
	path_of(idx, sizeof(idx), EPOCH, 1, "idx");
	seg_img = slurp(seg, &seg_len);
	idx_img = slurp(idx, &idx_len);
	last_off = rec_offset(1, N);
	assert_int_equal((off_t)seg_len, last_off + rec_bytes(N));
	if (indexed_last) {
		uint64_t last_entry_seq;

		memcpy(&last_entry_seq, idx_img + idx_len - IDX_ENT, 8);
		assert_int_equal(last_entry_seq, N);
	}

	for (off_t cut = last_off; cut < (off_t)seg_len; cut++) {
		tb_store_t *s;

		spit(seg, seg_img, (size_t)cut);
		spit(idx, idx_img, idx_len);
		s = open_ok(EPOCH, 64 << 10);
		assert_int_equal(tb_store_last_seq(s), N - 1);
		assert_int_equal(file_size(seg), last_off);
		assert_int_equal(file_size(idx),
				 (off_t)idx_len - (indexed_last ? IDX_ENT : 0));
		append_range(s, N, N + 1);
		read_all(s, 1, N + 1, 1000);
		tb_store_close(s);
		/* What the writer rebuilt is what it first wrote. */
		{
			size_t l;
			uint8_t *b = slurp(idx, &l);

			assert_true(l >= idx_len);
			assert_memory_equal(b, idx_img, idx_len);
			free(b);
			b = slurp(seg, &l);
			assert_true(l > seg_len);
			assert_memory_equal(b + HDR, seg_img + HDR, seg_len - HDR);
			free(b);
		}
	}
	free(seg_img);
	free(idx_img);
}

static void torn_tail_cut_at_every_byte(void **state)
{
	(void)state;
	torn_tail_at(0);
}

static void torn_tail_with_index_entry_past_the_data(void **state)
{
	(void)state;
	torn_tail_at(1);
}

static void torn_tail_warning_says_bytes_and_last_good(void **state)
{
	char seg[512], logp[400], *quiet, buf[1024] = "";
	tb_store_t *s = open_ok(EPOCH, 1 << 20);
	int saved, fd;
	ssize_t got;

	(void)state;
	append_range(s, 1, 50);
	tb_store_close(s);
	path_of(seg, sizeof(seg), EPOCH, 1, "seg");
	assert_int_equal(truncate(seg, file_size(seg) - 5), 0);

	snprintf(logp, sizeof(logp), "%s/stderr.log", tmp);
	quiet = getenv("TICKBUS_QUIET");
	unsetenv("TICKBUS_QUIET");
	fflush(stderr);
	saved = dup(2);
	fd = open(logp, O_RDWR | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 2);
	s = open_ok(EPOCH, 1 << 20);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	if (quiet)
		setenv("TICKBUS_QUIET", quiet, 1);
	got = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	assert_true(got > 0);
	buf[got] = '\0';
	{
		char want[64];

		snprintf(want, sizeof(want), "cut %u bytes", rec_bytes(50) - 5);
		assert_non_null(strstr(buf, want));
	}
	assert_non_null(strstr(buf, "last good sequence 49"));
	assert_non_null(strstr(buf, "00000000000000000001.seg"));
	assert_int_equal(tb_store_last_seq(s), 49);
	tb_store_close(s);
}

static void index_pointing_past_the_data_is_repaired(void **state)
{
	char seg[512], idx[512];
	uint64_t firsts[64], f;
	tb_store_t *s = open_ok(EPOCH, 32 << 10);
	int n;

	(void)state;
	append_range(s, 1, 1000);
	tb_store_close(s);
	n = seg_firsts(EPOCH, firsts, 64);
	assert_true(n >= 3);
	f = firsts[n - 1];
	path_of(seg, sizeof(seg), EPOCH, f, "seg");
	path_of(idx, sizeof(idx), EPOCH, f, "idx");
	assert_true(file_size(idx) > HDR + 2 * IDX_ENT);
	/* As a machine crash can leave it: the index longer than the data. */
	assert_int_equal(truncate(seg, rec_offset(f, f + 3)), 0);
	s = open_ok(EPOCH, 32 << 10);
	assert_int_equal(tb_store_last_seq(s), f + 2);
	assert_int_equal(file_size(idx), HDR + IDX_ENT);
	append_range(s, f + 3, 1500);
	read_all(s, 1, 1500, 10000);
	tb_store_close(s);

	/* A corrupt entry in the middle: dropped with what follows, and
	 * rebuilt identically from the data. */
	n = seg_firsts(EPOCH, firsts, 64);
	f = firsts[n - 1];
	path_of(idx, sizeof(idx), EPOCH, f, "idx");
	{
		size_t l1, l2;
		uint8_t *before = slurp(idx, &l1), *after;

		assert_true(l1 >= HDR + 3 * IDX_ENT);
		flip(idx, HDR + IDX_ENT + 3);
		s = open_ok(EPOCH, 32 << 10);
		assert_int_equal(tb_store_last_seq(s), 1500);
		tb_store_close(s);
		after = slurp(idx, &l2);
		assert_int_equal(l1, l2);
		assert_memory_equal(before, after, l1);
		free(before);
		free(after);
	}
	/* A lost index file is rebuilt too. */
	assert_int_equal(unlink(idx), 0);
	s = open_ok(EPOCH, 32 << 10);
	assert_int_equal(tb_store_last_seq(s), 1500);
	read_all(s, f, 1500, 10000);
	tb_store_close(s);
	assert_true(file_size(idx) > HDR);
}

static void flipped_byte_in_the_tail_record_is_cut(void **state)
{
	char seg[512];
	tb_store_t *s = open_ok(EPOCH, 1 << 20);

	(void)state;
	append_range(s, 1, 300);
	tb_store_close(s);
	path_of(seg, sizeof(seg), EPOCH, 1, "seg");
	flip(seg, rec_offset(1, 300) + 8 + TB_FRAME_HDR_LEN + 3);
	s = open_ok(EPOCH, 1 << 20);
	assert_int_equal(tb_store_last_seq(s), 299);
	assert_int_equal(file_size(seg), rec_offset(1, 300));
	append_range(s, 300, 310);
	read_all(s, 1, 310, 50);
	tb_store_close(s);
}

/* A lost range met by a replay. */
typedef struct lost {
	uint64_t a, b;
} lost_t;

/*
 * Replays [from, to] in reads of `step`, checking every frame, stepping over
 * each range the store reports lost (TB_STORE_LOST, then tb_store_lost).
 * Returns how many ranges there were; the first `max` go to lost[], each
 * from where the replay met it.  Any other failure fails the test.
 */
static int replay_holes(tb_store_t *s, uint64_t from, uint64_t to, int step,
			lost_t *lost, int max)
{
	check_t c = {from, 0, 0};
	int n = 0;

	while (c.next <= to) {
		uint64_t want = to - c.next + 1, a = 0, b = 0;
		int r = tb_store_read(s, c.next, want < (uint64_t)step ? (int)want : step,
				      on_frame, &c);

		if (r > 0)
			continue;
		if (r != TB_STORE_LOST)
			fail_msg("read at %" PRIu64 ": %d %s", c.next, r, tb_errmsg());
		assert_int_equal(tb_store_lost(s, c.next, &a, &b), 1);
		assert_true(a <= c.next && c.next <= b);
		if (n < max)
			lost[n] = (lost_t){c.next, b < to ? b : to};
		n++;
		c.next = b + 1;
	}
	assert_int_equal(c.next, to + 1);
	return n;
}

/* Runs `open` with stderr going to a buffer; returns the store. */
static tb_store_t *open_logged(const tb_store_cfg_t *c, char *log, size_t len,
			       int *rc)
{
	char logp[400], *quiet;
	tb_store_t *s = NULL;
	int saved, fd;
	ssize_t got;

	snprintf(logp, sizeof(logp), "%s/stderr.log", tmp);
	quiet = getenv("TICKBUS_QUIET");
	unsetenv("TICKBUS_QUIET");
	fflush(stderr);
	saved = dup(2);
	fd = open(logp, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	dup2(fd, 2);
	*rc = tb_store_open(&s, c);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	if (quiet)
		setenv("TICKBUS_QUIET", quiet, 1);
	got = pread(fd, log, len - 1, 0);
	close(fd);
	log[got > 0 ? got : 0] = '\0';
	return s;
}

static void corrupt_record_in_a_sealed_segment_is_a_hole_of_its_range(void **state)
{
	char seg[512], want[64];
	uint64_t firsts[256], bad, a, b;
	tb_store_t *s = open_ok(EPOCH, 16 << 10);
	check_t c = {1, 0, 0};
	lost_t lost[4];
	off_t off;
	int r;

	(void)state;
	append_range(s, 1, 1000);
	tb_store_close(s);
	assert_true(seg_firsts(EPOCH, firsts, 256) > 3);
	bad = firsts[1] / 2;      /* middle of the first, sealed segment */
	path_of(seg, sizeof(seg), EPOCH, 1, "seg");
	off = rec_offset(1, bad);
	flip(seg, off + 8 + TB_FRAME_HDR_LEN + 1);

	s = open_ok(EPOCH, 16 << 10);         /* sealed: not scanned on open */
	assert_int_equal(tb_store_last_seq(s), 1000);
	assert_int_equal(tb_store_lost(s, bad, &a, &b), 0);   /* not met yet */
	r = tb_store_read(s, 1, 100000, on_frame, &c);
	assert_int_equal(r, (int)(bad - 1));  /* everything before it */
	r = tb_store_read(s, bad, 10, on_frame, &c);
	assert_int_equal(r, TB_STORE_LOST);
	assert_non_null(strstr(tb_errmsg(), "00000000000000000001.seg"));
	snprintf(want, sizeof(want), "offset %lld", (long long)off);
	assert_non_null(strstr(tb_errmsg(), want));
	snprintf(want, sizeof(want), "sequences %" PRIu64 "..%" PRIu64 " are lost",
		 bad, bad);
	assert_non_null(strstr(tb_errmsg(), want));
	/* Exactly its range. */
	assert_int_equal(tb_store_lost(s, bad, &a, &b), 1);
	assert_int_equal(a, bad);
	assert_int_equal(b, bad);
	assert_int_equal(tb_store_lost(s, bad - 1, &a, &b), 0);
	assert_int_equal(tb_store_lost(s, bad + 1, &a, &b), 0);
	assert_int_equal(STAT(s, holes), 1);
	assert_int_equal(STAT(s, records_lost), 1);
	/* The records after it are served, from it or from before. */
	c.next = bad + 1;
	assert_int_equal(tb_store_read(s, bad + 1, 5, on_frame, &c), 5);
	c.next = bad - 3;
	assert_int_equal(tb_store_read(s, bad - 3, 10, on_frame, &c), 3);
	assert_int_equal(replay_holes(s, 1, 1000, 100000, lost, 4), 1);
	assert_int_equal(lost[0].a, bad);
	assert_int_equal(lost[0].b, bad);
	tb_store_close(s);

	/* A sealed segment without its index is still read right, only by
	 * stepping from its start. */
	{
		char idx[512];
		uint64_t ex0;

		path_of(idx, sizeof(idx), EPOCH, firsts[2], "idx");
		assert_int_equal(unlink(idx), 0);
		s = open_ok(EPOCH, 16 << 10);
		ex0 = STAT(s, records_examined);
		read_all(s, firsts[3] - 1, firsts[3] - 1, 1);
		assert_int_equal(STAT(s, records_examined) - ex0,
				 firsts[3] - firsts[2]);
		read_all(s, firsts[2], 1000, 100000);
		tb_store_close(s);
	}
}

/* A joiner replaying from 1 through damage in sealed segments (a payload
 * byte, a record length) and in the active one: every intact record is
 * delivered, each damaged one reported as exactly its own range. */
static void replay_from_one_steps_over_every_damaged_record(void **state)
{
	const uint64_t n = 20000;
	char seg[512];
	uint64_t firsts[256], bad[3], last_first;
	tb_store_t *s = open_ok(EPOCH, 64 << 10);
	lost_t lost[8];
	int nseg;

	(void)state;
	append_range(s, 1, n);
	tb_store_close(s);
	nseg = seg_firsts(EPOCH, firsts, 256);
	assert_true(nseg > 10);
	last_first = firsts[nseg - 1];
	bad[0] = firsts[2] + 17;                       /* payload byte */
	bad[1] = firsts[5] + 40;                       /* length field */
	bad[2] = last_first + (n - last_first) / 3;    /* active, index intact */
	path_of(seg, sizeof(seg), EPOCH, firsts[2], "seg");
	flip(seg, rec_offset(firsts[2], bad[0]) + 8 + TB_FRAME_HDR_LEN + 9);
	path_of(seg, sizeof(seg), EPOCH, firsts[5], "seg");
	flip(seg, rec_offset(firsts[5], bad[1]) + 1);
	path_of(seg, sizeof(seg), EPOCH, last_first, "seg");
	flip(seg, rec_offset(last_first, bad[2]) + 8 + 3);

	s = open_ok(EPOCH, 64 << 10);
	assert_int_equal(tb_store_last_seq(s), n);
	assert_int_equal(replay_holes(s, 1, n, 4096, lost, 8), 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(lost[i].a, bad[i]);
		assert_int_equal(lost[i].b, bad[i]);
	}
	assert_int_equal(STAT(s, records_lost), 3);
	/* The same again, from the holes now known, in small reads. */
	assert_int_equal(replay_holes(s, 1, n, 7, lost, 8), 3);
	assert_int_equal(STAT(s, holes), 3);
	/* Appending goes on past damage in the active segment. */
	append_range(s, n + 1, n + 10);
	assert_int_equal(replay_holes(s, bad[2] - 2, n + 10, 1000, lost, 8), 1);
	tb_store_close(s);
}

/* Damage in the middle of the active segment whose index is gone: not a
 * torn tail.  The records after it are kept; the damaged file is set aside
 * as it was found. */
static void damage_in_the_active_segment_is_quarantined_not_cut(void **state)
{
	const uint64_t n = 3000, bad = 1500;
	char seg[512], idx[512], log[4096], qdir[400], want[128];
	uint8_t *orig, *q;
	size_t orig_len, q_len;
	tb_store_cfg_t c;
	tb_store_t *s = open_ok(EPOCH, 1 << 20);
	struct dirent *de;
	lost_t lost[4];
	DIR *d;
	int rc, nq = 0;

	(void)state;
	append_range(s, 1, n);
	tb_store_close(s);
	assert_int_equal(seg_firsts(EPOCH, (uint64_t[4]){0}, 4), 1);
	path_of(seg, sizeof(seg), EPOCH, 1, "seg");
	path_of(idx, sizeof(idx), EPOCH, 1, "idx");
	flip(seg, rec_offset(1, bad) + 8 + TB_FRAME_HDR_LEN + 2);
	assert_int_equal(unlink(idx), 0);
	orig = slurp(seg, &orig_len);

	cfg_make(&c, EPOCH, 1 << 20);
	s = open_logged(&c, log, sizeof(log), &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(tb_store_last_seq(s), n);     /* nothing cut */
	assert_null(strstr(log, "bytes of torn tail"));
	assert_non_null(strstr(log, "not a torn tail"));
	assert_non_null(strstr(log, "quarantined as quarantine/00000000000000000001.seg."));
	snprintf(want, sizeof(want), "sequences %" PRIu64 "..%" PRIu64 " lost", bad, bad);
	assert_non_null(strstr(log, want));
	assert_int_equal(STAT(s, segments_quarantined), 1);
	assert_int_equal(replay_holes(s, 1, n, 1000, lost, 4), 1);
	assert_int_equal(lost[0].a, bad);
	assert_int_equal(lost[0].b, bad);
	assert_int_equal(STAT(s, records_lost), 1);
	/* The damaged file, as it was found, in quarantine/. */
	snprintf(qdir, sizeof(qdir), "%s/%u-%016" PRIx64 "/quarantine", root, STREAM,
		 EPOCH);
	d = opendir(qdir);
	assert_non_null(d);
	while ((de = readdir(d))) {
		char p[800];

		if (de->d_name[0] == '.')
			continue;
		nq++;
		snprintf(p, sizeof(p), "%s/%s", qdir, de->d_name);
		q = slurp(p, &q_len);
		assert_int_equal(q_len, orig_len);
		assert_memory_equal(q, orig, orig_len);
		free(q);
	}
	closedir(d);
	assert_int_equal(nq, 1);
	/* The segment in place holds the intact records only. */
	assert_int_equal(file_size(seg), (off_t)orig_len - rec_bytes(bad));
	append_range(s, n + 1, n + 100);
	tb_store_close(s);

	/* Reopened: the hole is recorded in the data; nothing more is set
	 * aside, nothing is cut. */
	s = open_logged(&c, log, sizeof(log), &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(tb_store_last_seq(s), n + 100);
	assert_int_equal(STAT(s, segments_quarantined), 0);
	assert_null(strstr(log, "warning"));
	assert_int_equal(replay_holes(s, 1, n + 100, 333, lost, 4), 1);
	assert_int_equal(lost[0].a, bad);
	assert_int_equal(lost[0].b, bad);
	tb_store_close(s);
	/* Without its index too. */
	assert_int_equal(unlink(idx), 0);
	s = open_ok(EPOCH, 1 << 20);
	assert_int_equal(tb_store_last_seq(s), n + 100);
	assert_int_equal(STAT(s, segments_quarantined), 0);
	assert_int_equal(replay_holes(s, 1, n + 100, 50, lost, 4), 1);
	assert_int_equal(lost[0].a, bad);
	tb_store_close(s);
	free(orig);
}

/* What a machine crash can leave: a page in the middle never written
 * (zeros), records after it that were.  The records the page touched are
 * lost, exactly those; the rest is kept. */
static void unwritten_page_in_the_active_segment_is_a_hole(void **state)
{
	const uint64_t n = 3000;
	const off_t zoff = 200704;   /* a page boundary inside the data */
	char seg[512], idx[512];
	uint64_t first_hit = 0, last_hit = 0;
	static const uint8_t zero[4096];
	tb_store_t *s = open_ok(EPOCH, 1 << 20);
	lost_t lost[4];

	(void)state;
	append_range(s, 1, n);
	tb_store_close(s);
	for (uint64_t q = 1; q <= n; q++) {
		off_t a = rec_offset(1, q), b = a + rec_bytes(q);

		if (b > zoff && a < zoff + 4096) {
			if (!first_hit)
				first_hit = q;
			last_hit = q;
		}
	}
	assert_true(first_hit > 1 && last_hit < n && last_hit > first_hit);
	path_of(seg, sizeof(seg), EPOCH, 1, "seg");
	path_of(idx, sizeof(idx), EPOCH, 1, "idx");
	patch(seg, zoff, zero, sizeof(zero));
	assert_int_equal(unlink(idx), 0);
	s = open_ok(EPOCH, 1 << 20);
	assert_int_equal(tb_store_last_seq(s), n);
	assert_int_equal(replay_holes(s, 1, n, 10000, lost, 4), 1);
	assert_int_equal(lost[0].a, first_hit);
	assert_int_equal(lost[0].b, last_hit);
	tb_store_close(s);
}

/* Read-only, the same damage is served the same way, and nothing on disk
 * changes. */
static void read_only_open_serves_around_damage_and_changes_nothing(void **state)
{
	const uint64_t n = 2000, bad = 777;
	char seg[512], idx[512], qdir[400];
	uint8_t *before, *after;
	size_t l1, l2;
	tb_store_cfg_t c;
	tb_store_t *s = open_ok(EPOCH, 1 << 20);
	lost_t lost[4];

	(void)state;
	append_range(s, 1, n);
	tb_store_close(s);
	path_of(seg, sizeof(seg), EPOCH, 1, "seg");
	path_of(idx, sizeof(idx), EPOCH, 1, "idx");
	flip(seg, rec_offset(1, bad) + 8 + 5);
	assert_int_equal(unlink(idx), 0);
	before = slurp(seg, &l1);
	cfg_make(&c, EPOCH, 1 << 20);
	c.read_only = 1;
	assert_int_equal(tb_store_open(&s, &c), 0);
	assert_int_equal(tb_store_last_seq(s), n);
	assert_int_equal(replay_holes(s, 1, n, 100, lost, 4), 1);
	assert_int_equal(lost[0].a, bad);
	assert_int_equal(lost[0].b, bad);
	assert_int_equal(STAT(s, segments_quarantined), 0);
	assert_int_equal(tb_store_append(s, frame(n + 1)), TB_ESTATE);
	tb_store_close(s);
	after = slurp(seg, &l2);
	assert_int_equal(l1, l2);
	assert_memory_equal(before, after, l1);
	assert_int_equal(access(idx, F_OK), -1);
	snprintf(qdir, sizeof(qdir), "%s/%u-%016" PRIx64 "/quarantine", root, STREAM,
		 EPOCH);
	assert_int_equal(access(qdir, F_OK), -1);
	free(before);
	free(after);
}

/* A sealed segment whose end is gone loses its end only. */
static void sealed_segment_cut_short_loses_only_its_end(void **state)
{
	char seg[512];
	uint64_t firsts[256], mid;
	tb_store_t *s = open_ok(EPOCH, 16 << 10);
	lost_t lost[4];

	(void)state;
	append_range(s, 1, 1000);
	tb_store_close(s);
	assert_true(seg_firsts(EPOCH, firsts, 256) > 4);
	mid = (firsts[2] + firsts[3]) / 2;
	path_of(seg, sizeof(seg), EPOCH, firsts[2], "seg");
	assert_int_equal(truncate(seg, rec_offset(firsts[2], mid) + 5), 0);
	s = open_ok(EPOCH, 16 << 10);
	assert_int_equal(replay_holes(s, 1, 1000, 100000, lost, 4), 1);
	assert_int_equal(lost[0].a, mid);
	assert_int_equal(lost[0].b, firsts[3] - 1);
	/* A read from inside the lost end names the whole range. */
	{
		check_t c = {mid + 1, 0, 0};
		uint64_t a, b;

		assert_int_equal(tb_store_read(s, mid + 1, 10, on_frame, &c),
				 TB_STORE_LOST);
		assert_int_equal(tb_store_lost(s, mid + 1, &a, &b), 1);
		assert_int_equal(a, mid);
		assert_int_equal(b, firsts[3] - 1);
	}
	tb_store_close(s);
}

/* An index entry that passes its CRC but names the wrong record is not
 * believed: reads start from an entry that holds what it says. */
static void index_entry_naming_the_wrong_record_is_not_trusted(void **state)
{
	char idx[512];
	uint64_t firsts[64];
	tb_store_t *s = open_ok(EPOCH, 64 << 10);
	uint8_t *img;
	size_t len, n;
	uint64_t q;
	lost_t lost[2];

	(void)state;
	append_range(s, 1, 2000);
	tb_store_close(s);
	assert_true(seg_firsts(EPOCH, firsts, 64) >= 3);
	path_of(idx, sizeof(idx), EPOCH, firsts[0], "idx");
	img = slurp(idx, &len);
	n = (len - HDR) / IDX_ENT;
	assert_true(n >= 4);
	/* Entry 2 says it is 3 sequences earlier than the record it points
	 * at, still above entry 1: a forged, self-consistent entry. */
	{
		uint8_t *e = img + HDR + 2 * IDX_ENT;
		uint64_t prev;
		uint32_t crc;

		memcpy(&q, e, 8);
		memcpy(&prev, e - IDX_ENT, 8);
		assert_true(q - 3 > prev);
		q -= 3;
		memcpy(e, &q, 8);
		crc = tb_crc32c(0, e, 12);
		memcpy(e + 12, &crc, 4);
	}
	spit(idx, img, len);
	s = open_ok(EPOCH, 64 << 10);
	read_all(s, q, q + 5, 1);
	read_all(s, q - 1, q + 10, 100);
	assert_int_equal(replay_holes(s, 1, 2000, 64, lost, 2), 0);
	assert_int_equal(STAT(s, holes), 0);
	tb_store_close(s);
	free(img);
}

/* Copies every file of `from` (one level) into `to`, replacing it. */
static void tree_copy(const char *from, const char *to)
{
	struct dirent *de;
	DIR *d;

	nftw(to, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	assert_int_equal(mkdir(to, 0755), 0);
	d = opendir(from);
	assert_non_null(d);
	while ((de = readdir(d))) {
		char a[800], b[800];
		uint8_t *img;
		size_t len;

		if (de->d_name[0] == '.' || de->d_type == DT_DIR)
			continue;
		snprintf(a, sizeof(a), "%s/%s", from, de->d_name);
		snprintf(b, sizeof(b), "%s/%s", to, de->d_name);
		img = slurp(a, &len);
		spit(b, img, len);
		free(img);
	}
	closedir(d);
}

/*
 * Seeded random damage to segment and index files (flipped bits, zeroed or
 * random runs, cuts, headers included), then an open, read-only or not, and
 * a replay of everything: no crash (the suite runs under ASan and UBSan),
 * open refuses only with TB_EFORMAT, every frame delivered is intact and in
 * order, and every sequence between first and last is delivered or reported
 * lost, never skipped in silence.  What a fuzz target of the segment and
 * index readers will do at length.
 */
static void random_damage_never_breaks_reads(void **state)
{
	char live[400], pristine[400];
	uint64_t rng = 0x5eed5eedull;
	tb_store_t *s = open_ok(EPOCH, 4096);
	int opened = 0, refused = 0, holed = 0;

	(void)state;
	append_range(s, 1, 400);
	tb_store_close(s);
	snprintf(live, sizeof(live), "%s/%u-%016" PRIx64, root, STREAM, EPOCH);
	snprintf(pristine, sizeof(pristine), "%s/pristine", tmp);
	tree_copy(live, pristine);
	setenv("TICKBUS_QUIET", "1", 1);
	for (int it = 0; it < 300; it++) {
		uint64_t firsts[256];
		int nseg, nmut = 1 + (int)(rng_xorshift64s(&rng) % 3), rc;
		tb_store_cfg_t c;

		tree_copy(pristine, live);
		nseg = seg_firsts(EPOCH, firsts, 256);
		for (int m = 0; m < nmut; m++) {
			uint64_t r = rng_xorshift64s(&rng);
			char p[512];
			off_t len, at;
			uint8_t junk[64];

			path_of(p, sizeof(p), EPOCH, firsts[r % (uint64_t)nseg],
				(r >> 8) % 4 == 0 ? "idx" : "seg");
			len = file_size(p);
			if (len == 0)
				continue;
			/* Mostly after the header: header damage is refused. */
			at = (r >> 16) % 8 ? HDR + (off_t)((r >> 20) % (uint64_t)(len > HDR ? len - HDR : 1)) :
			     (off_t)((r >> 20) % (uint64_t)len);
			if (at >= len)
				at = len - 1;
			switch ((r >> 40) % 4) {
			case 0:
				flip(p, at);
				break;
			case 1:
			case 2: {
				size_t n = 1 + (size_t)((r >> 44) % sizeof(junk));

				if ((off_t)n > len - at)
					n = (size_t)(len - at);
				for (size_t i = 0; i < n; i++)
					junk[i] = (r >> 42) % 4 == 1 ? 0 :
						  (uint8_t)rng_xorshift64s(&rng);
				patch(p, at, junk, n);
				break;
			}
			default:
				assert_int_equal(truncate(p, at), 0);
			}
		}
		cfg_make(&c, EPOCH, 4096);
		c.read_only = (int)(rng_xorshift64s(&rng) % 2);
		s = NULL;
		rc = tb_store_open(&s, &c);
		if (rc != 0) {
			assert_int_equal(rc, TB_EFORMAT);
			refused++;
			continue;
		}
		opened++;
		if (tb_store_last_seq(s)) {
			lost_t lost[64];

			if (replay_holes(s, tb_store_first_seq(s), tb_store_last_seq(s),
					 1 + (int)(rng_xorshift64s(&rng) % 200), lost,
					 64) > 0)
				holed++;
		}
		if (!c.read_only) {
			uint64_t last = tb_store_last_seq(s);

			append_range(s, last + 1, last + 20);
			tb_store_close(s);
			s = open_ok(EPOCH, 4096);
			assert_int_equal(tb_store_last_seq(s), last + 20);
			read_all(s, last + 1, last + 20, 7);
		}
		tb_store_close(s);
	}
	unsetenv("TICKBUS_QUIET");
	/* Most damage is served around, some (headers) refused. */
	assert_true(opened > 200);
	assert_true(refused > 0);
	assert_true(holed > 30);
}

/* A full disk (here a file size limit) is an error from append, never a
 * signal, and what was appended before it stays. */
static void full_disk_is_an_error_not_a_signal(void **state)
{
	int pipefd[2], st;
	uint64_t got[2] = {0, 0};
	pid_t pid;

	(void)state;
	plen = plen_fixed64;
	assert_int_equal(pipe(pipefd), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = {300 << 10, 300 << 10};
		tb_store_t *cs = NULL;
		tb_store_cfg_t c;
		uint64_t q, res[2];
		int r = 0;

		close(pipefd[0]);
		signal(SIGXFSZ, SIG_IGN);
		cfg_make(&c, EPOCH, 1 << 20);
		if (tb_store_open(&cs, &c) != 0 || setrlimit(RLIMIT_FSIZE, &rl) != 0)
			_exit(2);
		for (q = 1; q < 100000; q++)
			if ((r = tb_store_append(cs, frame(q))) != 0)
				break;
		res[0] = q - 1;
		res[1] = (uint64_t)(int64_t)r;
		if (write(pipefd[1], res, sizeof(res)) != sizeof(res))
			_exit(3);
		tb_store_close(cs);
		_exit(0);
	}
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], got, sizeof(got)), sizeof(got));
	close(pipefd[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true((int64_t)got[1] < 0);               /* an error code */
	assert_true(got[0] > 1000 && got[0] < 4000);    /* ~300 KiB of records */
	{
		tb_store_t *s = open_ok(EPOCH, 1 << 20);

		assert_int_equal(tb_store_last_seq(s), got[0]);
		read_all(s, 1, got[0], 1000);
		append_range(s, got[0] + 1, got[0] + 10);
		tb_store_close(s);
	}
}

/* tb-recoveryd's pattern: one thread appends, others read, a mutex between
 * them.  Every frame a read delivers is whole and checks, including those
 * read right behind the writer in the mapped active segment. */
typedef struct race {
	pthread_mutex_t lock;
	tb_store_t *s;
	uint64_t n;
	int done;
	uint64_t reads, frames;
} race_t;

static void *race_reader(void *arg)
{
	race_t *r = arg;
	uint64_t rng = 0x9e37ull;

	for (;;) {
		uint64_t last, from;
		check_t c;
		int got, done;

		pthread_mutex_lock(&r->lock);
		done = r->done;
		last = tb_store_last_seq(r->s);
		if (last) {
			uint64_t x = rng_xorshift64s(&rng);

			from = x % 2 ? last - x % (last < 50 ? last : 50) :
			       1 + x % last;
			c = (check_t){from, 0, 0};
			got = tb_store_read(r->s, from, 200, on_frame, &c);
			assert_true(got > 0);
			r->reads++;
			r->frames += (uint64_t)got;
		}
		pthread_mutex_unlock(&r->lock);
		if (done)
			return NULL;
		sched_yield();
	}
}

static void reads_between_appends_see_whole_records(void **state)
{
	race_t r = {PTHREAD_MUTEX_INITIALIZER, NULL, 100000, 0, 0, 0};
	pthread_t t;

	(void)state;
	r.s = open_ok(EPOCH, 256 << 10);
	assert_int_equal(pthread_create(&t, NULL, race_reader, &r), 0);
	for (uint64_t q = 1; q <= r.n; q++) {
		pthread_mutex_lock(&r.lock);
		if (tb_store_append(r.s, frame(q)) != 0)
			fail_msg("append %" PRIu64 ": %s", q, tb_errmsg());
		pthread_mutex_unlock(&r.lock);
		if (q % 64 == 0)
			sched_yield();
	}
	pthread_mutex_lock(&r.lock);
	r.done = 1;
	pthread_mutex_unlock(&r.lock);
	pthread_join(t, NULL);
	assert_true(r.reads > 10);
	read_all(r.s, 1, r.n, 5000);
	tb_store_close(r.s);
}

static void bad_magic_or_version_is_refused(void **state)
{
	char seg[512], idx[512], dir_a[400], dir_b[400];
	uint64_t firsts[64];
	tb_store_t *s = open_ok(EPOCH, 8192);
	tb_store_cfg_t c;
	uint32_t v;
	uint8_t saved[8];
	int fd;

	(void)state;
	append_range(s, 1, 300);
	tb_store_close(s);
	assert_true(seg_firsts(EPOCH, firsts, 64) >= 3);
	path_of(seg, sizeof(seg), EPOCH, 1, "seg");
	cfg_make(&c, EPOCH, 8192);

	fd = open(seg, O_RDONLY);
	assert_int_equal(pread(fd, saved, 8, 0), 8);
	close(fd);
	patch(seg, 0, "NOTASTOR", 8);
	assert_int_equal(tb_store_open(&s, &c), TB_EFORMAT);
	assert_null(s);
	assert_non_null(strstr(tb_errmsg(), "00000000000000000001.seg"));
	assert_non_null(strstr(tb_errmsg(), "magic"));
	patch(seg, 0, saved, 8);

	v = 99;
	patch(seg, 8, &v, 4);
	assert_int_equal(tb_store_open(&s, &c), TB_EFORMAT);
	assert_non_null(strstr(tb_errmsg(), "version 99"));
	v = 1;
	patch(seg, 8, &v, 4);

	flip(seg, 45);  /* created_ns: caught by the header CRC */
	assert_int_equal(tb_store_open(&s, &c), TB_EFORMAT);
	assert_non_null(strstr(tb_errmsg(), "corrupt segment header"));
	flip(seg, 45);

	/* The last segment with version 0 and records after it is not an
	 * interrupted creation: refused, not deleted. */
	path_of(seg, sizeof(seg), EPOCH, firsts[seg_firsts(EPOCH, firsts, 64) - 1],
		"seg");
	v = 0;
	patch(seg, 8, &v, 4);
	assert_int_equal(tb_store_open(&s, &c), TB_EFORMAT);
	assert_non_null(strstr(tb_errmsg(), "version 0"));
	v = 1;
	patch(seg, 8, &v, 4);

	/* A bad index header is only a warning: the index is rebuilt. */
	path_of(idx, sizeof(idx), EPOCH, firsts[seg_firsts(EPOCH, firsts, 64) - 1],
		"idx");
	patch(idx, 0, "NOTANIDX", 8);
	s = open_ok(EPOCH, 8192);
	assert_int_equal(tb_store_last_seq(s), 300);
	read_all(s, 1, 300, 1000);
	tb_store_close(s);
	fd = open(idx, O_RDONLY);
	assert_int_equal(pread(fd, saved, 8, 0), 8);
	close(fd);
	assert_memory_not_equal(saved, "NOTANIDX", 8);

	/* Files moved to another stream's directory do not match it. */
	snprintf(dir_a, sizeof(dir_a), "%s/%u-%016" PRIx64, root, STREAM, EPOCH);
	snprintf(dir_b, sizeof(dir_b), "%s/%u-%016" PRIx64, root, STREAM,
		 EPOCH + 1);
	assert_int_equal(rename(dir_a, dir_b), 0);
	cfg_make(&c, EPOCH + 1, 8192);
	assert_int_equal(tb_store_open(&s, &c), TB_EFORMAT);
	assert_non_null(strstr(tb_errmsg(), "does not match"));
	assert_int_equal(rename(dir_b, dir_a), 0);
}

static void interrupted_segment_creation_is_removed(void **state)
{
	char seg[512];
	tb_store_t *s = open_ok(EPOCH, 8192);
	uint8_t hdr[HDR];
	int fd;

	(void)state;
	append_range(s, 1, 100);
	tb_store_close(s);
	/* A next segment whose header never got its version. */
	path_of(seg, sizeof(seg), EPOCH, 1, "seg");
	fd = open(seg, O_RDONLY);
	assert_int_equal(pread(fd, hdr, HDR, 0), HDR);
	close(fd);
	memset(hdr + 8, 0, 4);
	path_of(seg, sizeof(seg), EPOCH, 101, "seg");
	spit(seg, hdr, HDR);
	s = open_ok(EPOCH, 8192);
	assert_int_equal(tb_store_last_seq(s), 100);
	assert_int_equal(access(seg, F_OK), -1);
	append_range(s, 101, 200);
	read_all(s, 1, 200, 1000);
	tb_store_close(s);

	/* A header cut short. */
	path_of(seg, sizeof(seg), EPOCH, 201, "seg");
	spit(seg, hdr, 20);
	s = open_ok(EPOCH, 8192);
	assert_int_equal(tb_store_last_seq(s), 200);
	tb_store_close(s);
}

/* ------------------------------------------------------------ retention */

static void retention_by_bytes_drops_oldest_segments(void **state)
{
	tb_store_cfg_t c;
	tb_store_t *s = NULL;
	uint64_t firsts[256];
	check_t chk = {1, 0, 0};
	int n;

	(void)state;
	cfg_make(&c, EPOCH, 4096);
	c.retain_bytes = 6 * 4096;
	assert_int_equal(tb_store_open(&s, &c), 0);
	append_range(s, 1, 3000);
	assert_true(STAT(s, bytes) <= c.retain_bytes);
	assert_true(STAT(s, segments_deleted) > 50);
	assert_true(tb_store_first_seq(s) > 2500);
	n = seg_firsts(EPOCH, firsts, 256);
	assert_int_equal(n, (int)STAT(s, segments));
	assert_int_equal(firsts[0], tb_store_first_seq(s));
	assert_int_equal(tb_store_read(s, 1, 1, on_frame, &chk), TB_STORE_TOO_OLD);
	{
		char want[64];

		snprintf(want, sizeof(want), "earliest available is %" PRIu64,
			 tb_store_first_seq(s));
		assert_non_null(strstr(tb_errmsg(), want));
	}
	read_all(s, tb_store_first_seq(s), 3000, 10000);
	tb_store_close(s);

	/* A tighter bound applies at open; the active segment stays. */
	c.retain_bytes = 1;
	assert_int_equal(tb_store_open(&s, &c), 0);
	assert_int_equal(STAT(s, segments), 1);
	assert_int_equal(seg_firsts(EPOCH, firsts, 256), 1);
	assert_int_equal(tb_store_last_seq(s), 3000);
	read_all(s, tb_store_first_seq(s), 3000, 10000);
	tb_store_close(s);
}

static uint64_t test_clock(void *clockd)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
	       *(uint64_t *)clockd;
}

static void retention_by_age_drops_old_segments(void **state)
{
	tb_store_cfg_t c;
	tb_store_t *s = NULL;
	uint64_t skew = 0, firsts[256], active;
	int n;

	(void)state;
	cfg_make(&c, EPOCH, 4096);
	c.retain_age_s = 60;
	c.clock = test_clock;
	c.clockd = &skew;
	assert_int_equal(tb_store_open(&s, &c), 0);
	append_range(s, 1, 500);
	assert_int_equal(tb_store_flush(s), 0);
	assert_int_equal(STAT(s, segments_deleted), 0);
	n = seg_firsts(EPOCH, firsts, 256);
	active = firsts[n - 1];
	skew = 61ull * 1000000000ull;
	assert_int_equal(tb_store_retain(s), n - 1);
	assert_int_equal(STAT(s, segments), 1);
	assert_int_equal(tb_store_first_seq(s), active);
	read_all(s, active, 500, 1000);
	append_range(s, 501, 510);
	tb_store_close(s);

	/* Across a restart the age comes from the files' mtimes. */
	cfg_make(&c, EPOCH + 1, 4096);
	s = open_ok(EPOCH + 1, 4096);
	append_range(s, 1, 500);
	tb_store_close(s);
	n = seg_firsts(EPOCH + 1, firsts, 256);
	assert_true(n > 5);
	for (int i = 0; i < n - 2; i++) {  /* all but the newest two */
		char p[512];
		struct timespec t[2];

		clock_gettime(CLOCK_REALTIME, &t[0]);
		t[0].tv_sec -= 7200;
		t[1] = t[0];
		path_of(p, sizeof(p), EPOCH + 1, firsts[i], "seg");
		assert_int_equal(utimensat(AT_FDCWD, p, t, 0), 0);
	}
	c.retain_age_s = 3600;
	assert_int_equal(tb_store_open(&s, &c), 0);
	assert_int_equal(STAT(s, segments), 2);
	assert_int_equal(tb_store_first_seq(s), firsts[n - 2]);
	read_all(s, firsts[n - 2], 500, 1000);
	tb_store_close(s);
}

/* -------------------------------------------------- lifecycle, epochs */

static void reopen_resumes_appending(void **state)
{
	tb_store_cfg_t c;
	tb_store_t *s = open_ok(EPOCH, 4096), *s2 = NULL;

	(void)state;
	append_range(s, 1, 500);
	/* One writer per stream and epoch. */
	cfg_make(&c, EPOCH, 4096);
	assert_int_equal(tb_store_open(&s2, &c), TB_EBUSY);
	c.read_only = 1;
	assert_int_equal(tb_store_open(&s2, &c), TB_EBUSY);
	tb_store_close(s);

	s = open_ok(EPOCH, 4096);
	assert_int_equal(tb_store_last_seq(s), 500);
	assert_int_equal(tb_store_append(s, frame(500)), TB_EINVAL);
	append_range(s, 501, 1000);
	tb_store_close(s);
	s = open_ok(EPOCH, 4096);
	read_all(s, 1, 1000, 10000);
	tb_store_close(s);

	/* Read-only opens share, and refuse appends. */
	assert_int_equal(tb_store_open(&s, &c), 0);
	assert_int_equal(tb_store_open(&s2, &c), 0);
	read_all(s, 1, 1000, 64);
	read_all(s2, 990, 1000, 64);
	assert_int_equal(tb_store_append(s, frame(1001)), TB_ESTATE);
	tb_store_close(s);
	tb_store_close(s2);
}

static void sync_policies(void **state)
{
	tb_store_cfg_t c;
	tb_store_t *s = NULL;

	(void)state;
	cfg_make(&c, EPOCH, 4096);
	c.sync = TB_STORE_SYNC_BATCH;
	assert_int_equal(tb_store_open(&s, &c), 0);
	append_range(s, 1, 10);
	assert_int_equal(STAT(s, syncs), 0);
	assert_int_equal(tb_store_flush(s), 0);
	assert_int_equal(STAT(s, syncs), 1);
	assert_int_equal(tb_store_flush(s), 0);   /* nothing new */
	assert_int_equal(STAT(s, syncs), 1);
	append_range(s, 11, 200);                  /* rolls sync the sealed */
	assert_true(STAT(s, syncs) > 1);
	tb_store_close(s);

	cfg_make(&c, EPOCH + 1, 1 << 20);
	c.sync = TB_STORE_SYNC_INTERVAL;
	c.sync_interval_ms = 1;
	assert_int_equal(tb_store_open(&s, &c), 0);
	append_range(s, 1, 10);
	usleep(30000);
	append_range(s, 11, 11);                   /* due: synced at append */
	assert_true(STAT(s, syncs) >= 1);
	tb_store_close(s);

	cfg_make(&c, EPOCH + 2, 4096);
	assert_int_equal(tb_store_open(&s, &c), 0);
	append_range(s, 1, 200);
	assert_int_equal(tb_store_flush(s), 0);
	assert_int_equal(STAT(s, syncs), 0);
	tb_store_close(s);
}

static void epochs_are_listed_and_separate(void **state)
{
	uint64_t e[8] = {0};
	tb_store_cfg_t c;
	tb_store_t *s;

	(void)state;
	assert_int_equal(tb_store_epochs(root, STREAM, e, 8), 0);
	s = open_ok(5, 4096);
	append_range(s, 1, 10);
	tb_store_close(s);
	s = open_ok(0x123456789abcull, 4096);
	append_range(s, 1, 3);        /* a new epoch starts again at 1 */
	tb_store_close(s);
	s = open_ok(2, 4096);
	tb_store_close(s);
	cfg_make(&c, 9, 4096);
	c.stream_id = STREAM + 1;
	assert_int_equal(tb_store_open(&s, &c), 0);
	tb_store_close(s);

	assert_int_equal(tb_store_epochs(root, STREAM, e, 8), 3);
	assert_int_equal(e[0], 2);
	assert_int_equal(e[1], 5);
	assert_int_equal(e[2], 0x123456789abcull);
	memset(e, 0, sizeof(e));
	assert_int_equal(tb_store_epochs(root, STREAM, e, 1), 3);
	assert_int_equal(e[0], 2);
	assert_int_equal(e[1], 0);
	assert_int_equal(tb_store_epochs(root, STREAM + 1, e, 8), 1);
	assert_int_equal(e[0], 9);
	assert_int_equal(tb_store_epochs("/nonexistent/tickbus", STREAM, e, 8), 0);

	s = open_ok(5, 4096);
	assert_int_equal(tb_store_last_seq(s), 10);
	tb_store_close(s);
	s = open_ok(0x123456789abcull, 4096);
	assert_int_equal(tb_store_last_seq(s), 3);
	tb_store_close(s);

	cfg_make(&c, 77, 4096);
	c.read_only = 1;
	assert_int_equal(tb_store_open(&s, &c), TB_ENOENT);
}

static void bad_config_is_refused(void **state)
{
	tb_store_cfg_t c;
	tb_store_t *s = (tb_store_t *)1;

	(void)state;
	cfg_make(&c, EPOCH, 4096);
	c.stream_id = 0;
	assert_int_equal(tb_store_open(&s, &c), TB_EINVAL);
	assert_null(s);
	cfg_make(&c, EPOCH, 100);
	assert_int_equal(tb_store_open(&s, &c), TB_EINVAL);
	assert_non_null(strstr(tb_errmsg(), "segment_bytes"));
	cfg_make(&c, EPOCH, 4096);
	c.dir[0] = '\0';
	assert_int_equal(tb_store_open(&s, &c), TB_EINVAL);
	cfg_make(&c, EPOCH, 4096);
	c.sync = (tb_store_sync_t)9;
	assert_int_equal(tb_store_open(&s, &c), TB_EINVAL);
	assert_int_equal(tb_store_open(NULL, &c), TB_EINVAL);
	cfg_make(&c, EPOCH, 4096);
	snprintf(c.dir, sizeof(c.dir), "/nonexistent/dir/store");
	assert_true(tb_store_open(&s, &c) < 0);
	assert_int_equal(tb_store_close(NULL), 0);
}

/* ------------------------------------------------------ a real crash */

static uint32_t plen_crash(uint64_t seq)
{
	return seq % 97 == 0 ? 40000 : 16 + (uint32_t)(seq % 300);
}

static void crash_by_sigkill_keeps_everything_before_the_tail(void **state)
{
	const uint64_t signal_at = 3000;
	int pipefd[2];
	tb_store_t *s;
	uint64_t last;
	pid_t pid;
	char b;

	(void)state;
	plen = plen_crash;
	assert_int_equal(pipe(pipefd), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		tb_store_cfg_t c;
		tb_store_t *cs = NULL;

		close(pipefd[0]);
		cfg_make(&c, EPOCH, 1 << 20);
		c.sync = TB_STORE_SYNC_NONE;
		if (tb_store_open(&cs, &c) != 0)
			_exit(2);
		for (uint64_t q = 1; q < 5000000; q++) {
			if (tb_store_append(cs, frame(q)) != 0)
				_exit(3);
			if (q == signal_at && write(pipefd[1], "x", 1) != 1)
				_exit(4);
		}
		pause();
		_exit(0);
	}
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &b, 1), 1);
	close(pipefd[0]);
	usleep(2000 + (useconds_t)(time(NULL) % 20) * 1000);
	kill(pid, SIGKILL);
	{
		int st;

		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	}

	s = open_ok(EPOCH, 1 << 20);
	last = tb_store_last_seq(s);
	assert_true(last >= signal_at);
	assert_int_equal(tb_store_first_seq(s), 1);
	read_all(s, 1, last, 5000);
	append_range(s, last + 1, last + 100);
	tb_store_close(s);
	s = open_ok(EPOCH, 1 << 20);
	assert_int_equal(tb_store_last_seq(s), last + 100);
	read_all(s, last - 50, last + 100, 1000);
	tb_store_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(round_trip_across_many_segments),
		T(reads_at_segment_boundaries),
		T(read_stops_when_the_callback_says),
		T(read_cost_is_a_seek_not_a_scan),
		T(too_old_and_not_yet_name_the_bounds),
		T(out_of_order_and_duplicates_are_refused),
		T(batch_append_round_trips),
		T(torn_tail_cut_at_every_byte),
		T(torn_tail_with_index_entry_past_the_data),
		T(torn_tail_warning_says_bytes_and_last_good),
		T(index_pointing_past_the_data_is_repaired),
		T(flipped_byte_in_the_tail_record_is_cut),
		T(corrupt_record_in_a_sealed_segment_is_a_hole_of_its_range),
		T(replay_from_one_steps_over_every_damaged_record),
		T(damage_in_the_active_segment_is_quarantined_not_cut),
		T(unwritten_page_in_the_active_segment_is_a_hole),
		T(read_only_open_serves_around_damage_and_changes_nothing),
		T(sealed_segment_cut_short_loses_only_its_end),
		T(index_entry_naming_the_wrong_record_is_not_trusted),
		T(random_damage_never_breaks_reads),
		T(full_disk_is_an_error_not_a_signal),
		T(reads_between_appends_see_whole_records),
		T(bad_magic_or_version_is_refused),
		T(interrupted_segment_creation_is_removed),
		T(retention_by_bytes_drops_oldest_segments),
		T(retention_by_age_drops_old_segments),
		T(reopen_resumes_appending),
		T(sync_policies),
		T(epochs_are_listed_and_separate),
		T(bad_config_is_refused),
		T(crash_by_sigkill_keeps_everything_before_the_tail),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
