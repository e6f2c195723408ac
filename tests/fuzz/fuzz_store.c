/*
 * fuzz_store.c - libFuzzer target for the retransmit store's readers
 * (bus/recovery/store.c): what tb_store_open and tb_store_read make of
 * segment and index files found on disk, whoever or whatever wrote them.
 *
 * The input becomes the files of one store (stream 1, epoch 1) in a
 * directory made once per process (under /dev/shm when it exists: tmpfs
 * keeps the files in memory), written afresh for every input:
 *   u8   flags:
 *          1    open read-only (no repair on disk)
 *          2    records' CRCs (and lengths) made right before writing, so
 *               that inputs get past the CRC to the checks behind it
 *          4    index entries' CRCs made right
 *          8    two segments: the first sealed, the second active
 *          16   no index files
 *          32   records' sequences made right (with 2: from the segment's
 *               first sequence up)
 *          64   a header byte replaced (segment or index, by the next u16)
 *          128  with 1 clear: append the next sequence after open (the
 *               append grows and maps the active segment, which costs a
 *               MiB of zeros: a quarter of the inputs pay it)
 *   u16  where the header byte goes (bits 0..6: offset; bit 7: index file;
 *        bit 8: the first segment's files) and u8 its value
 *   u16  first sequence of the first segment, minus 1
 *   u8   sequences in the sealed segment (its successor's first sequence
 *        is the first's plus this, at least 1)
 *   u16  bytes of records of the first segment, then those bytes
 *   u16  bytes of records of the second segment (if any), then those
 *   u16  bytes of the first segment's index entries, then those
 *   u16  bytes of the second's index entries, then those
 * Headers are written as the format says (magic, version, length, stream,
 * epoch, first sequence, CRC32C), so that inputs reach the records; flag
 * 64 breaks them on purpose.
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - open succeeds or fails with TB_EFORMAT (TB_ENOMEM aside);
 *   - an opened store says first <= last, or is empty (both 0);
 *   - reads before the first and after the last sequence are TB_STORE_TOO_OLD
 *     and TB_STORE_NOT_YET;
 *   - a read delivers consecutive sequences from the one asked for, each a
 *     frame whose length field is at least a header and which lies 8-byte
 *     aligned; it ends with a count, or with TB_STORE_LOST when it starts
 *     in a range lost to damage, which tb_store_lost() then names;
 *   - a replay of everything, from the first to the last sequence, going
 *     on after each lost range as a recovery server does, covers every
 *     sequence once (delivered or reported lost), in order, and ends:
 *     damage never ends a replay;
 *   - the last sequence reads back (open checked the active segment's
 *     tail and cut what did not check);
 *   - opened for writing (and asked to, flag 128), the store takes the
 *     next sequence (but UINT64_MAX, which it refuses) and returns it byte
 *     for byte; a fresh read-only open sees the same last sequence.
 */
#include "bus/crc32c.h"
#include "bus/error.h"
#include "bus/recovery/store.h"
#include "tests/fuzz/fuzz_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The on-disk format (store.c's essay), written here independently. */
#define SEG_MAGIC UINT64_C(0x544e4d4745534274) /* "tBSEGMNT" */
#define IDX_MAGIC UINT64_C(0x5f58444e49534274) /* "tBSINDX_" */
#define HDR_LEN 64
#define STREAM 1
#define EPOCH 1

enum {
	F_RO = 1, F_FIX_REC = 2, F_FIX_IDX = 4, F_TWO = 8, F_NO_IDX = 16,
	F_FIX_SEQ = 32, F_BREAK_HDR = 64, F_APPEND = 128,
};

static char root[64];       /* the directory handed to the store */
static char epoch_dir[128]; /* root/<stream>-<epoch> */

static void put32(uint8_t *b, uint32_t v) { memcpy(b, &v, 4); }
static void put64(uint8_t *b, uint64_t v) { memcpy(b, &v, 8); }

static void remove_root(void)
{
	rmdir(root);
}

static void make_root(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

	if (root[0])
		return;
	snprintf(root, sizeof(root), "%s/tb-fuzz-store-XXXXXX", base);
	if (!mkdtemp(root))
		abort();
	atexit(remove_root);
	snprintf(epoch_dir, sizeof(epoch_dir), "%s/%u-%016x", root, STREAM,
		 EPOCH);
	/* No warnings for every torn tail the fuzzer makes. */
	setenv("TICKBUS_QUIET", "1", 1);
}

/* Removes every file of `dir`, its quarantine/ and the directory. */
static void clean_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[512];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (!strcmp(e->d_name, "quarantine"))
			clean_dir(p);
		else
			unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

static void clean(void)
{
	clean_dir(epoch_dir);
}

static void header(uint8_t h[HDR_LEN], uint64_t magic, uint64_t first_seq)
{
	memset(h, 0, HDR_LEN);
	put64(h, magic);
	put32(h + 8, 1);        /* version */
	put32(h + 12, HDR_LEN); /* header length */
	put32(h + 16, STREAM);
	put64(h + 24, EPOCH);
	put64(h + 32, first_seq);
	put64(h + 40, 1);       /* created */
	put32(h + 60, tb_crc32c(0, h, 60));
}

/* Records: [u32 len][u32 crc][frame], padded to 8.  Makes lengths, CRCs
 * and sequences right as far as the bytes go, as the flags ask. */
static void fix_records(uint8_t *b, size_t n, unsigned flags, uint64_t seq)
{
	size_t off = 0;

	while (off + 8 + 32 <= n) {
		uint32_t len;

		memcpy(&len, b + off, 4);
		if (len < 32 || len > n - off - 8)
			len = (uint32_t)(n - off - 8) & ~7u;
		if (len < 32)
			break;
		put32(b + off, len);
		put32(b + off + 8, len); /* the frame's own length */
		if (flags & F_FIX_SEQ)
			put64(b + off + 8 + 16, seq++);
		put32(b + off + 4, tb_crc32c(0, b + off + 8, len));
		off += 8 + ((len + 7) & ~(size_t)7);
	}
}

static void fix_index(uint8_t *b, size_t n)
{
	for (size_t off = 0; off + 16 <= n; off += 16)
		put32(b + off + 12, tb_crc32c(0, b + off, 12));
}

static void write_file(uint64_t first_seq, const char *ext, const uint8_t *hdr,
		       const uint8_t *body, size_t n)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/%020" PRIu64 ".%s", epoch_dir, first_seq, ext);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, hdr, HDR_LEN) != HDR_LEN ||
	    (n && write(fd, body, n) != (ssize_t)n))
		abort();
	close(fd);
}

typedef struct reading {
	uint64_t next;
	int count;
} reading_t;

static int on_frame(void *clientd, const tb_frame_hdr_t *f)
{
	reading_t *rd = clientd;

	if (f->seq != rd->next || f->length < TB_FRAME_HDR_LEN ||
	    ((uintptr_t)f & 7))
		abort();
	rd->next++;
	rd->count++;
	return 0;
}

/* Reads up to `max` from `first`: consecutive frames, or TB_STORE_LOST
 * for a range that tb_store_lost() names and that holds `first`. */
static int read_check(tb_store_t *s, uint64_t first, int max)
{
	reading_t rd = {first, 0};
	int r = tb_store_read(s, first, max, on_frame, &rd);
	uint64_t a, b;

	if (r >= 0 ? r != rd.count || r > max || r == 0 :
	    r != TB_STORE_LOST || rd.count != 0 ||
	    !tb_store_lost(s, first, &a, &b) || a > first || b < first)
		abort();
	return r;
}

/* Replays [first, last] as a recovery server does, across holes: every
 * sequence is delivered once or falls in a range reported lost, in order,
 * and the replay reaches the end. */
static void replay_all(tb_store_t *s, uint64_t first, uint64_t last)
{
	uint64_t q = first, a, b;
	uint64_t steps = 0;
	/* Each step delivers or passes a lost range, so at most two steps a
	 * sequence; a span of 2^62 or more (a lost range can be that wide)
	 * would overflow the doubling, and bounds nothing anyway. */
	uint64_t span = last - first + 1;
	uint64_t bound = span >= UINT64_C(1) << 62 ? UINT64_MAX : 2 * span + 2;

	while (q <= last) {
		int r = read_check(s, q, 64);

		if (++steps > bound)
			abort(); /* no progress */
		if (r > 0) {
			q += (uint64_t)r;
			continue;
		}
		tb_store_lost(s, q, &a, &b);
		if (b >= last)
			break;
		q = b + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t shdr[2][HDR_LEN], ihdr[2][HDR_LEN], *rec[2], *idx[2];
	size_t rec_len[2] = {0, 0}, idx_len[2] = {0, 0};
	uint64_t first[2], first_seq, last_seq;
	unsigned flags, where, nseg;
	tb_store_cfg_t cfg;
	tb_store_t *s;
	fuzz_in_t in;
	uint8_t value;
	int r;

	make_root();
	fuzz_in_init(&in, data, size);
	flags = fuzz_u8(&in);
	where = fuzz_u16(&in);
	value = fuzz_u8(&in);
	first[0] = 1 + (uint64_t)fuzz_u16(&in);
	first[1] = first[0] + 1 + fuzz_u8(&in);
	nseg = flags & F_TWO ? 2 : 1;
	for (unsigned i = 0; i < 2; i++) {
		const uint8_t *p = fuzz_bytes(&in, fuzz_u16(&in), &rec_len[i]);

		rec[i] = fuzz_copy(p, rec_len[i]);
	}
	for (unsigned i = 0; i < 2; i++) {
		const uint8_t *p = fuzz_bytes(&in, fuzz_u16(&in), &idx_len[i]);

		idx[i] = fuzz_copy(p, idx_len[i]);
	}

	mkdir(epoch_dir, 0755);
	for (unsigned i = 0; i < nseg; i++) {
		header(shdr[i], SEG_MAGIC, first[i]);
		header(ihdr[i], IDX_MAGIC, first[i]);
		if ((flags & F_BREAK_HDR) && ((where >> 8) & 1) == i)
			(where & 0x80 ? ihdr[i] : shdr[i])[(where & 0x7f) %
							    HDR_LEN] = value;
		if (flags & F_FIX_REC)
			fix_records(rec[i], rec_len[i], flags, first[i]);
		if (flags & F_FIX_IDX)
			fix_index(idx[i], idx_len[i]);
		write_file(first[i], "seg", shdr[i], rec[i], rec_len[i]);
		if (!(flags & F_NO_IDX))
			write_file(first[i], "idx", ihdr[i], idx[i], idx_len[i]);
	}

	tb_store_cfg_init(&cfg);
	snprintf(cfg.dir, sizeof(cfg.dir), "%s", root);
	cfg.stream_id = STREAM;
	cfg.epoch = EPOCH;
	cfg.read_only = flags & F_RO;
	r = tb_store_open(&s, &cfg);
	if (r < 0) {
		if (r != TB_EFORMAT && r != TB_ENOMEM)
			abort();
		goto out;
	}
	first_seq = tb_store_first_seq(s);
	last_seq = tb_store_last_seq(s);
	if (first_seq > last_seq || (first_seq == 0) != (last_seq == 0))
		abort();
	if (last_seq && first_seq > 1 &&
	    tb_store_read(s, first_seq - 1, 1, on_frame, &(reading_t){0, 0}) !=
	    TB_STORE_TOO_OLD)
		abort();
	if (tb_store_read(s, last_seq + 1, 1, on_frame,
			  &(reading_t){last_seq + 1, 0}) != TB_STORE_NOT_YET)
		abort();
	if (last_seq) {
		replay_all(s, first_seq, last_seq);
		read_check(s, first_seq + (last_seq - first_seq) / 2, 3);
		/* Open checked the active segment from its last good index
		 * point to the end, and cut what did not check: the last
		 * sequence reads.  (Records before that point are checked when
		 * a read reaches them, as a sealed segment's are.)  The active
		 * segment is the only one, or the second when it holds the
		 * last sequence. */
		if (read_check(s, last_seq, 1) != 1 &&
		    (nseg == 1 || last_seq >= first[1]))
			abort();
	}
	if (!cfg.read_only && (flags & F_APPEND)) {
		uint8_t frame[64];
		tb_frame_hdr_t *f = (tb_frame_hdr_t *)frame;
		uint64_t next = last_seq ? last_seq + 1 : first[0];
		reading_t rd = {next, 0};

		memset(frame, 0xab, sizeof(frame));
		tb_frame_init(f, sizeof(frame) - TB_FRAME_HDR_LEN, 1, STREAM, next,
			      7);
		if (next == UINT64_MAX) {
			/* The last number is never stored (its successor
			 * could not be numbered). */
			if (tb_store_append(s, f) != TB_EINVAL ||
			    tb_store_last_seq(s) != last_seq)
				abort();
		} else {
			if (tb_store_append(s, f) != 0 ||
			    tb_store_last_seq(s) != next ||
			    tb_store_read(s, next, 1, on_frame, &rd) != 1)
				abort();
			last_seq = next;
		}
	}
	if (tb_store_close(s) != 0)
		abort();
	cfg.read_only = 1;
	if (tb_store_open(&s, &cfg) != 0 || tb_store_last_seq(s) != last_seq)
		abort();
	tb_store_close(s);
out:
	clean();
	for (unsigned i = 0; i < 2; i++) {
		free(rec[i]);
		free(idx[i]);
	}
	return 0;
}
