/*
 * bench_store - retransmit store: append rate, replay rate, crash recovery.
 *
 * Each figure sits next to a floor measured in the same run on the same
 * file system, so the ratio says what the store itself costs:
 *   append (one frame per call)  vs  write() of the same record bytes, one
 *                                    call per record; goal >= 10 M rec/s
 *                                    for 64-byte payloads (issue 15)
 *   append_batch (64 per call)   vs  write() of the same 64 records at once
 *   replay (tb_store_read)       vs  pread() of the same file in the same
 *                                    64 KiB chunks: by the writer that
 *                                    appended them (its mapped segment),
 *                                    and after a reopen (pread, as every
 *                                    sealed segment is read)
 *   open after a crash           vs  pread() of the whole 64 MiB segment
 * The store runs with TB_STORE_SYNC_NONE: these are page-cache figures, the
 * cost of the store's own code and system calls, not of the disk.  Every
 * figure is the median of RUNS runs.
 *
 * Not a test: it prints "bench store:" lines and exits 0 unless it could
 * not run.  TB_BENCH_DIR picks the directory (default /tmp).
 */
#include "bus/recovery/store.h"

#include "bus/crc32c.h"
#include "bus/error.h"

#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUNS 5
#define STREAM 1
#define BATCH 64
#define RING 1024          /* distinct frames cycled through */
#define SEG_64MIB (64ull << 20)

static char root[256];

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v)
{
	qsort(v, RUNS, sizeof(*v), cmp_d);
	return v[RUNS / 2];
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st; (void)flag; (void)f;
	return remove(p);
}

static void rm_tree(const char *p)
{
	nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* Times on a shared machine are only worth as much as the load beside
 * them. */
static void print_load(const char *when)
{
	char buf[64] = "?";
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			strcpy(buf, "?");
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = '\0';
	printf("bench store: load average at %s: %s\n", when, buf);
}

static void die(const char *what)
{
	fprintf(stderr, "bench store: %s: %s\n", what, tb_errmsg());
	rm_tree(root);
	exit(1);
}

/* RING frames of `payload` bytes, each 8-aligned, plus their record images
 * (what the store writes) laid end to end. */
typedef struct frames {
	uint8_t *mem;      /* frames, `stride` apart */
	size_t stride;
	uint8_t *recs;     /* record images, `rec` bytes each */
	size_t rec;
} frames_t;

static void frames_make(frames_t *fr, uint32_t payload)
{
	uint32_t len = TB_FRAME_HDR_LEN + payload;

	fr->stride = (len + 7) & ~(size_t)7;
	fr->rec = 8 + fr->stride;
	fr->mem = aligned_alloc(64, fr->stride * RING);
	fr->recs = aligned_alloc(64, fr->rec * RING);
	memset(fr->mem, 0, fr->stride * RING);
	memset(fr->recs, 0, fr->rec * RING);
	for (int i = 0; i < RING; i++) {
		tb_frame_hdr_t *f = (tb_frame_hdr_t *)(fr->mem + fr->stride * (size_t)i);
		uint32_t crc;

		tb_frame_init(f, payload, 1, STREAM, (uint64_t)i + 1, 0);
		for (uint32_t k = 0; k < payload; k++)
			((uint8_t *)f)[TB_FRAME_HDR_LEN + k] = (uint8_t)(i * 7 + k);
		crc = tb_crc32c(0, f, len);
		memcpy(fr->recs + fr->rec * (size_t)i, &len, 4);
		memcpy(fr->recs + fr->rec * (size_t)i + 4, &crc, 4);
		memcpy(fr->recs + fr->rec * (size_t)i + 8, f, len);
	}
}

static tb_frame_hdr_t *frame_at(frames_t *fr, uint64_t seq)
{
	tb_frame_hdr_t *f = (tb_frame_hdr_t *)(fr->mem + fr->stride *
					       (size_t)(seq % RING));

	f->seq = seq;
	return f;
}

static tb_store_t *store_open_sync(uint64_t epoch, uint64_t seg_bytes,
				   tb_store_sync_t sync)
{
	tb_store_cfg_t c;
	tb_store_t *s;

	tb_store_cfg_init(&c);
	snprintf(c.dir, sizeof(c.dir), "%s", root);
	c.stream_id = STREAM;
	c.epoch = epoch;
	c.segment_bytes = seg_bytes;
	c.sync = sync;
	if (tb_store_open(&s, &c) != 0)
		die("open");
	return s;
}

static tb_store_t *store_open(uint64_t epoch, uint64_t seg_bytes)
{
	return store_open_sync(epoch, seg_bytes, TB_STORE_SYNC_NONE);
}

static void store_remove(uint64_t epoch)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%u-%016" PRIx64, root, STREAM, epoch);
	rm_tree(p);
}

/* ----------------------------------------------------------- appends */

static double replay(tb_store_t *s, uint64_t n);

/* Single appends; then, when `live` is not NULL, the writer replays what
 * it appended (time in *live). */
static double append_one(frames_t *fr, uint64_t n, uint64_t epoch, double *live)
{
	tb_store_t *s = store_open(epoch, SEG_64MIB);
	double t0 = now_s(), t;

	for (uint64_t q = 1; q <= n; q++)
		if (tb_store_append(s, frame_at(fr, q)) != 0)
			die("append");
	t = now_s() - t0;
	if (live)
		*live = replay(s, n);
	tb_store_close(s);
	return t;
}

/* Batches of BATCH, each followed by tb_store_flush: the durability point,
 * which fdatasyncs under `sync` = BATCH, and when due under INTERVAL. */
static double append_batch_sync(frames_t *fr, uint64_t n, uint64_t epoch,
				tb_store_sync_t sync)
{
	tb_store_t *s = store_open_sync(epoch, SEG_64MIB, sync);
	const tb_frame_hdr_t *v[BATCH];
	uint8_t *copies = aligned_alloc(64, fr->stride * BATCH);
	double t0, t;

	/* A batch needs BATCH distinct frames alive at once. */
	for (int i = 0; i < BATCH; i++)
		v[i] = (const tb_frame_hdr_t *)(copies + fr->stride * (size_t)i);
	t0 = now_s();
	for (uint64_t q = 1; q <= n; q += BATCH) {
		int k = n - q + 1 < BATCH ? (int)(n - q + 1) : BATCH;

		for (int i = 0; i < k; i++) {
			tb_frame_hdr_t *f = (tb_frame_hdr_t *)v[i];

			memcpy(f, frame_at(fr, q + (uint64_t)i), TB_FRAME_HDR_LEN);
		}
		if (tb_store_append_batch(s, v, k) != k)
			die("append_batch");
		if (sync != TB_STORE_SYNC_NONE && tb_store_flush(s) != 0)
			die("flush");
	}
	t = now_s() - t0;
	tb_store_close(s);
	free(copies);
	return t;
}

static double append_batch(frames_t *fr, uint64_t n, uint64_t epoch)
{
	return append_batch_sync(fr, n, epoch, TB_STORE_SYNC_NONE);
}

/* Same record bytes, `per_call` records per write(), each write followed
 * by fdatasync() when `sync`. */
static double floor_write_sync(frames_t *fr, uint64_t n, int per_call, int sync)
{
	char p[512];
	double t0, t;
	int fd;

	snprintf(p, sizeof(p), "%s/floor.dat", root);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("floor open");
	t0 = now_s();
	for (uint64_t q = 0; q < n; q += (uint64_t)per_call) {
		size_t at = (size_t)(q % RING), k = (size_t)per_call;

		if (at + k > RING)
			at = 0;
		if (write(fd, fr->recs + at * fr->rec, k * fr->rec) !=
		    (ssize_t)(k * fr->rec))
			die("floor write");
		if (sync && fdatasync(fd) != 0)
			die("floor fdatasync");
	}
	t = now_s() - t0;
	close(fd);
	unlink(p);
	return t;
}

static double floor_write(frames_t *fr, uint64_t n, int per_call)
{
	return floor_write_sync(fr, n, per_call, 0);
}

/* Durable appends: fdatasync per batch of BATCH, and at most every 100 ms
 * (the INTERVAL default), beside write() + fdatasync() per batch. */
static void bench_durable(uint32_t payload, uint64_t n)
{
	double tb_[RUNS], ti[RUNS], fb[RUNS];
	frames_t fr;
	double mb;

	frames_make(&fr, payload);
	mb = (double)n * (double)fr.rec / 1e6;
	for (int i = 0; i < RUNS; i++) {
		fb[i] = floor_write_sync(&fr, n, BATCH, 1);
		store_remove(3);
		tb_[i] = append_batch_sync(&fr, n, 3, TB_STORE_SYNC_BATCH);
		store_remove(3);
		ti[i] = append_batch_sync(&fr, n, 3, TB_STORE_SYNC_INTERVAL);
		store_remove(3);
	}
	{
		double b = median(tb_), iv = median(ti), f = median(fb);

		printf("bench store: %4u-byte payload, durable, %" PRIu64 " records in batches of %d\n",
		       payload, n, BATCH);
		printf("bench store:   sync per batch %6.3f M rec/s %7.1f MB/s | floor write()+fdatasync() of %d %6.3f M rec/s | ratio %.2fx\n",
		       (double)n / b / 1e6, mb / b, BATCH, (double)n / f / 1e6, b / f);
		printf("bench store:   sync 100 ms    %6.3f M rec/s %7.1f MB/s | (an fdatasync at most every 100 ms)\n",
		       (double)n / iv / 1e6, mb / iv);
	}
	free(fr.mem);
	free(fr.recs);
}

/* --------------------------------------------------------------- replay */

static int on_frame(void *clientd, const tb_frame_hdr_t *f)
{
	*(uint64_t *)clientd += f->length;
	return 0;
}

static double replay(tb_store_t *s, uint64_t n)
{
	uint64_t sum = 0, q = 1;
	double t0 = now_s();

	while (q <= n) {
		int r = tb_store_read(s, q, 4096, on_frame, &sum);

		if (r <= 0)
			die("read");
		q += (uint64_t)r;
	}
	return now_s() - t0 + (sum == 0 ? 1 : 0);
}

static double floor_pread(const char *path, size_t chunk)
{
	uint8_t *b = malloc(chunk);
	uint64_t off = 0, sum = 0;
	double t0 = now_s();
	ssize_t r;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || !b)
		die("floor pread open");
	while ((r = pread(fd, b, chunk, (off_t)off)) > 0) {
		sum += b[0];
		off += (uint64_t)r;
	}
	close(fd);
	free(b);
	return now_s() - t0 + (sum == 1 ? 1e-12 : 0);
}

static void bench_payload(uint32_t payload, uint64_t n)
{
	double ta[RUNS], tb[RUNS], fa[RUNS], fb[RUNS], tr[RUNS], fr_[RUNS], tl[RUNS];
	frames_t fr;
	char seg[512];
	double mb;

	frames_make(&fr, payload);
	mb = (double)n * (double)fr.rec / 1e6;
	for (int i = 0; i < RUNS; i++) {
		fa[i] = floor_write(&fr, n, 1);
		ta[i] = append_one(&fr, n, 1, &tl[i]);
		fb[i] = floor_write(&fr, n, BATCH);
		store_remove(1);
		tb[i] = append_batch(&fr, n, 1);
		/* Replay what the batch run wrote. */
		{
			tb_store_t *s = store_open(1, SEG_64MIB);

			snprintf(seg, sizeof(seg), "%s/%u-%016" PRIx64 "/%020u.seg",
				 root, STREAM, (uint64_t)1, 1u);
			fr_[i] = floor_pread(seg, 64 << 10);
			tr[i] = replay(s, n);
			tb_store_close(s);
		}
		store_remove(1);
	}
	{
		double a = median(ta), b = median(tb), f1 = median(fa),
		       f64 = median(fb), r = median(tr), fp = median(fr_),
		       l = median(tl);

		printf("bench store: %4u-byte payload, no fsync, %" PRIu64 " records of %zu bytes (%.0f MB)\n",
		       payload, n, fr.rec, mb);
		printf("bench store:   append        %6.2f M rec/s %7.0f MB/s | floor write() per record %6.2f M rec/s | ratio %.2fx",
		       (double)n / a / 1e6, mb / a, (double)n / f1 / 1e6, a / f1);
		if (payload == 64)
			printf(" | goal >= 10 M rec/s: %s", (double)n / a >= 10e6 ?
			       "met" : "NOT met");
		printf("\n");
		printf("bench store:   append_batch  %6.2f M rec/s %7.0f MB/s | floor write() of %d     %6.2f M rec/s | ratio %.2fx\n",
		       (double)n / b / 1e6, mb / b, BATCH, (double)n / f64 / 1e6, b / f64);
		printf("bench store:   replay, live  %6.2f M rec/s %7.0f MB/s | floor pread() 64 KiB    %6.0f MB/s      | ratio %.2fx (the writer, from its mapping)\n",
		       (double)n / l / 1e6, mb / l, mb / fp, l / fp);
		printf("bench store:   replay        %6.2f M rec/s %7.0f MB/s | floor pread() 64 KiB    %6.0f MB/s      | ratio %.2fx (reopened: pread)\n",
		       (double)n / r / 1e6, mb / r, mb / fp, r / fp);
	}
	free(fr.mem);
	free(fr.recs);
}

/* ------------------------------------------------------------- recovery */

static void bench_recovery(void)
{
	double t_idx[RUNS], t_full[RUNS], t_floor[RUNS];
	char seg[512], idx[512];
	frames_t fr;
	uint64_t last = 0;
	pid_t pid;
	int st;

	frames_make(&fr, 512);
	/* A writer fills one 64 MiB segment and is killed without closing. */
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		tb_store_t *s = store_open(2, SEG_64MIB);
		uint64_t room = SEG_64MIB - 64 - fr.rec;

		for (uint64_t q = 1; q * fr.rec <= room; q++)
			if (tb_store_append(s, frame_at(&fr, q)) != 0)
				_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFSIGNALED(st))
		die("crash writer");
	setenv("TICKBUS_QUIET", "1", 1);
	/* The writer left room after its data (store.c, Appending): the
	 * first open cuts it; the runs below start from the data alone. */
	{
		double t0 = now_s();
		tb_store_t *s = store_open(2, SEG_64MIB);

		printf("bench store: open after SIGKILL of a writer (room after the data cut) %9.1f us\n",
		       (now_s() - t0) * 1e6);
		tb_store_close(s);
	}
	snprintf(seg, sizeof(seg), "%s/%u-%016" PRIx64 "/%020u.seg", root, STREAM,
		 (uint64_t)2, 1u);
	snprintf(idx, sizeof(idx), "%s/%u-%016" PRIx64 "/%020u.idx", root, STREAM,
		 (uint64_t)2, 1u);
	for (int i = 0; i < RUNS; i++) {
		struct stat sb;
		tb_store_t *s;
		double t0;

		/* Tear the last record, as a crash mid-write would. */
		if (stat(seg, &sb) < 0 || truncate(seg, sb.st_size - 3) < 0)
			die("tear");
		t0 = now_s();
		s = store_open(2, SEG_64MIB);
		t_idx[i] = now_s() - t0;
		last = tb_store_last_seq(s);
		tb_store_close(s);

		/* Worst case: the index lost too; the whole segment is
		 * scanned and the index rebuilt. */
		if (stat(seg, &sb) < 0 || truncate(seg, sb.st_size - 3) < 0 ||
		    unlink(idx) < 0)
			die("tear");
		t0 = now_s();
		s = store_open(2, SEG_64MIB);
		t_full[i] = now_s() - t0;
		tb_store_close(s);

		t_floor[i] = floor_pread(seg, 1 << 20);
	}
	{
		double a = median(t_idx), b = median(t_full), f = median(t_floor);
		struct stat sb;

		stat(seg, &sb);
		printf("bench store: recovery of a %.0f MiB segment after SIGKILL and a torn tail (%" PRIu64 " records)\n",
		       (double)sb.st_size / (1 << 20), last);
		printf("bench store:   open, index intact    %9.1f us\n", a * 1e6);
		printf("bench store:   open, index lost      %9.1f us (full scan + CRC) | floor pread() of the segment %9.1f us | ratio %.2fx\n",
		       b * 1e6, f * 1e6, b / f);
	}
	store_remove(2);
	free(fr.mem);
	free(fr.recs);
}

int main(void)
{
	const char *base = getenv("TB_BENCH_DIR");
	double t0 = now_s();

	snprintf(root, sizeof(root), "%s/tb_bench_store.XXXXXX", base ? base : "/tmp");
	if (!mkdtemp(root)) {
		perror("bench store: mkdtemp");
		return 1;
	}
	{
		struct statfs sf;
		const char *fs = "?";

		if (statfs(root, &sf) == 0)
			fs = sf.f_type == 0x01021994 ? "tmpfs: fdatasync is free" :
			     sf.f_type == 0x794c7630 ? "overlayfs" :
			     sf.f_type == 0xef53 ? "ext4" : sf.f_type == 0x58465342 ?
			     "xfs" : "other";
		printf("bench store: %s (%s), crc32c %s, median of %d runs; "
		       "TB_BENCH_DIR picks the directory\n", root, fs,
		       tb_crc32c_hw_available() ? "sse4.2" : "table", RUNS);
	}
	print_load("start");
	bench_payload(64, 400000);
	bench_payload(512, 100000);
	bench_durable(64, 64 * 500);
	bench_recovery();
	rm_tree(root);
	print_load("end");
	printf("bench store: done in %.1f s\n", now_s() - t0);
	return 0;
}
