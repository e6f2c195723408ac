/*
 * store.c - the retransmit store.
 *
 * What it is.  The recovery service keeps every frame of a stream on disk so
 * that it can replay any range a subscriber lost.  Frames arrive in sequence
 * order and are never changed once written, so the store is a log: files
 * that only grow, cut into segments so that old data can be dropped a whole
 * file at a time.
 *
 * Layout.
 *
 *   <dir>/<stream_id>-<epoch, 16 hex digits>/
 *       <first seq, 20 digits>.seg    records, in sequence order
 *       <first seq, 20 digits>.idx    the segment's sparse index
 *
 * One directory per stream and epoch, because a publisher restart starts the
 * sequence again at 1: two epochs can never share a segment name, and the
 * epochs present are a directory listing (tb_store_epochs).  Twenty digits
 * make the names sort by sequence as strings, for a person with `ls`.
 *
 * Both kinds of file start with the same 64-byte header (store_hdr_t): magic
 * (which says .seg or .idx), format version, header length, stream id,
 * epoch, the segment's first sequence, creation time, and a CRC32C of the
 * header.  The version is written last, in a second pwrite, so a file whose
 * creation was interrupted reads as version 0; it is checked first on open.
 * The header's fields must agree with the directory and file name, so a file
 * copied into the wrong place is refused rather than served.
 *
 * A record is [u32 frame length][u32 CRC32C of the frame bytes][frame],
 * padded with zeros to 8 bytes.  Records start on 8-byte boundaries, so the
 * frame handed to a reader is aligned for tb_frame_hdr_t.  The record
 * length is the frame's own length repeated: a reader can step over a
 * record without trusting the frame, and a disagreement between the two is
 * corruption.
 *
 * The index is a separate file of 16-byte entries [u64 seq][u32 offset]
 * [u32 CRC32C of the 12 bytes before], one for the first record of the
 * segment and then one for the first record that starts at least
 * TB_STORE_INDEX_INTERVAL bytes after the previous indexed one.  Sparse, so
 * it costs 16 bytes per 4 KiB of data (0.4%), and a lookup lands within
 * 4 KiB (plus one record) of any sequence: a read is a binary search over
 * the segments' first sequences, a binary search over the index, one pread,
 * and at most a page of records stepped over.  A separate file rather than
 * a trailer because the active segment needs an index too, and because a
 * segment stays a plain concatenation of records that tools can walk.
 *
 * Invariants.
 *   I1  Sequences are contiguous across the whole store: segment k holds
 *       [first_k, first_{k+1} - 1]; the last holds [first_last, last_seq].
 *       Append refuses anything but last_seq + 1.
 *   I2  Only the last segment is ever written.  Older ones are sealed: their
 *       size and contents never change until retention deletes them.
 *   I3  Data is written before the index entry that points at it, so after
 *       a process crash an index entry may be missing, never ahead.  (After
 *       a machine crash without sync either file may be short; open repairs
 *       both.)  The index is therefore only an accelerator: every record is
 *       checked by its CRC and expected sequence when read.
 *   I4  Index entries rise strictly in both sequence and offset, and follow
 *       one deterministic rule, so open can regenerate the missing tail of
 *       the index and get exactly what the writer would have written.
 *
 * Crash recovery (open).  Only the last segment can have a torn tail (I2).
 * Open loads its index, drops entries that fail their CRC, break I4 or point
 * at or past the end of the file or at a record that does not check, then
 * scans forward from the last good entry, checking each record.  The first
 * record that is short, has an impossible length, a bad CRC or the wrong
 * sequence ends the valid data: the file is cut there (ftruncate) with a
 * warning giving the bytes cut and the last good sequence, and the index is
 * trimmed and completed to match.  A last segment whose header is
 * incomplete (its creation was interrupted) is removed.  Sealed segments
 * are not scanned on open (that would cost the whole store); corruption
 * inside them is found when a read reaches it and is reported as
 * TB_EFORMAT naming the file and offset, never skipped, because a replay
 * with a hole in it is worse than a refusal.
 *
 * Retention.  At open, after a roll, at flush, and at any append that takes
 * the store over its byte bound, whole oldest segments are deleted while
 * the store's bytes exceed retain_bytes or the oldest segment's newest
 * record (its file mtime, or the clock when this process sealed it) is
 * older than retain_age_s.  The segment being appended to is never
 * deleted.  The .seg goes first, then the .idx; an .idx with no .seg is
 * removed at open.
 *
 * Durability.  Each append is one pwritev, so once it returns the record is
 * in the page cache and survives the process.  Surviving the machine is
 * what fdatasync buys, per the configured policy.  The index is never
 * synced on its own account: open rebuilds it.
 */
#include "bus/recovery/store.h"

#include "bus/clock.h"
#include "bus/crc32c.h"
#include "bus/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the store's file formats are little-endian and read in place"
#endif

/* ------------------------------------------------------------- formats */

#define STORE_SEG_MAGIC 0x544e4d4745534274ull /* "tBSEGMNT" little-endian */
#define STORE_IDX_MAGIC 0x5f58444e49534274ull /* "tBSINDX_" */
#define STORE_FORMAT_VERSION 1u
#define STORE_HDR_LEN 64u
#define STORE_REC_ALIGN 8u
/* Reads go to disk in chunks of this size; scans on open in larger ones. */
#define STORE_READ_CHUNK (64u << 10)
#define STORE_SCAN_CHUNK (1u << 20)
/* Records gathered into one pwritev by append_batch (3 iovecs each). */
#define STORE_GROUP_MAX 64

typedef struct store_hdr {
	uint64_t magic;
	uint32_t version;    /* written last, checked first */
	uint32_t hdr_len;    /* STORE_HDR_LEN */
	uint32_t stream_id;
	uint32_t reserved0;
	uint64_t epoch;
	uint64_t first_seq;  /* of the segment (the .idx repeats it) */
	uint64_t created_ns; /* CLOCK_REALTIME base */
	uint64_t reserved1;
	uint32_t reserved2;
	uint32_t crc;        /* CRC32C of bytes 0..59, version as final */
} store_hdr_t;

_Static_assert(offsetof(store_hdr_t, magic) == 0, "store header layout");
_Static_assert(offsetof(store_hdr_t, version) == 8, "store header layout");
_Static_assert(offsetof(store_hdr_t, hdr_len) == 12, "store header layout");
_Static_assert(offsetof(store_hdr_t, stream_id) == 16, "store header layout");
_Static_assert(offsetof(store_hdr_t, reserved0) == 20, "store header layout");
_Static_assert(offsetof(store_hdr_t, epoch) == 24, "store header layout");
_Static_assert(offsetof(store_hdr_t, first_seq) == 32, "store header layout");
_Static_assert(offsetof(store_hdr_t, created_ns) == 40, "store header layout");
_Static_assert(offsetof(store_hdr_t, reserved1) == 48, "store header layout");
_Static_assert(offsetof(store_hdr_t, reserved2) == 56, "store header layout");
_Static_assert(offsetof(store_hdr_t, crc) == 60, "store header layout");
_Static_assert(sizeof(store_hdr_t) == STORE_HDR_LEN, "store header layout");

typedef struct store_rec {
	uint32_t len; /* frame bytes = the frame's own length field */
	uint32_t crc; /* CRC32C of the frame bytes */
} store_rec_t;

_Static_assert(offsetof(store_rec_t, len) == 0, "record layout");
_Static_assert(offsetof(store_rec_t, crc) == 4, "record layout");
_Static_assert(sizeof(store_rec_t) == 8, "record layout");
_Static_assert(STORE_HDR_LEN % STORE_REC_ALIGN == 0, "records start aligned");

typedef struct store_idx {
	uint64_t seq;
	uint32_t off;
	uint32_t crc; /* CRC32C of seq and off */
} store_idx_t;

_Static_assert(offsetof(store_idx_t, seq) == 0, "index entry layout");
_Static_assert(offsetof(store_idx_t, off) == 8, "index entry layout");
_Static_assert(offsetof(store_idx_t, crc) == 12, "index entry layout");
_Static_assert(sizeof(store_idx_t) == 16, "index entry layout");
_Static_assert(TB_STORE_SEGMENT_MAX + TB_FRAME_MAX_LEN + 64 < (1ull << 32),
	       "index offsets fit 32 bits");

static inline uint32_t rec_space(uint32_t frame_len)
{
	return (uint32_t)sizeof(store_rec_t) +
	       ((frame_len + STORE_REC_ALIGN - 1) & ~(STORE_REC_ALIGN - 1));
}

/* ---------------------------------------------------------------- state */

typedef struct seg {
	uint64_t first_seq;
	uint64_t size;      /* valid bytes of the .seg, header included */
	uint64_t idx_size;  /* bytes of the .idx */
	uint64_t newest_ns; /* wall time of its newest record */
} seg_t;

typedef struct idx_vec {
	store_idx_t *e;
	size_t n, cap;
} idx_vec_t;

struct tb_store {
	tb_store_cfg_t cfg;
	char path[PATH_MAX]; /* the stream-and-epoch directory */
	int dirfd;           /* holds the flock */

	seg_t *segs;         /* ascending; the last is the active one */
	size_t nsegs, segcap;
	uint64_t last_seq;   /* 0: empty */
	uint64_t bytes;      /* all .seg and .idx bytes */

	int afd, aifd;       /* active segment and its index, -1: none */
	idx_vec_t aidx;      /* the active segment's index, all of it */

	uint64_t r_key;      /* first_seq of the sealed segment whose fd and
			        index are cached for reading; 0: none */
	int rfd;
	idx_vec_t ridx;

	uint8_t *buf;        /* read window: file bytes [w_off, w_off+w_len)
			        of the segment whose first_seq is w_key */
	size_t bufcap, w_len;
	uint64_t w_key, w_off;

	uint64_t last_sync_ns; /* tb_clock_mono_coarse_ns: checked at every
				  append, where a tick's error is nothing */
	int dirty;             /* appended since the last sync */
	tb_store_stats_t st;
};

/* The configured wall clock (tests move it), else the system's. */
static uint64_t wall_ns(const tb_store_t *s)
{
	if (s->cfg.clock)
		return s->cfg.clock(s->cfg.clockd);
	return tb_clock_realtime_ns();
}

static void file_name(char out[32], uint64_t first_seq, const char *ext)
{
	snprintf(out, 32, "%020" PRIu64 ".%s", first_seq, ext);
}

static int idx_push(idx_vec_t *v, uint64_t seq, uint64_t off)
{
	store_idx_t *e;

	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 256;

		e = realloc(v->e, cap * sizeof(*e));
		if (!e)
			return tb_error_set(TB_ENOMEM, "store: index of %zu entries",
					  cap);
		v->e = e;
		v->cap = cap;
	}
	e = &v->e[v->n++];
	e->seq = seq;
	e->off = (uint32_t)off;
	e->crc = tb_crc32c(0, e, offsetof(store_idx_t, crc));
	return 0;
}

/* Entry to start a read of `seq` from: the last one at or before it. */
static const store_idx_t *idx_find(const idx_vec_t *v, uint64_t seq)
{
	size_t lo = 0, hi = v->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (v->e[mid].seq <= seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &v->e[lo - 1] : NULL;
}

/* Index of the segment holding `seq` (segs[0].first_seq <= seq). */
static size_t seg_find(const tb_store_t *s, uint64_t seq)
{
	size_t lo = 0, hi = s->nsegs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->segs[mid].first_seq <= seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

/* ------------------------------------------------------------- headers */

static void hdr_fill(const tb_store_t *s, store_hdr_t *h, uint64_t magic,
		     uint64_t first_seq)
{
	memset(h, 0, sizeof(*h));
	h->magic = magic;
	h->version = STORE_FORMAT_VERSION;
	h->hdr_len = STORE_HDR_LEN;
	h->stream_id = s->cfg.stream_id;
	h->epoch = s->cfg.epoch;
	h->first_seq = first_seq;
	h->created_ns = wall_ns(s);
	h->crc = tb_crc32c(0, h, offsetof(store_hdr_t, crc));
}

enum { HDR_OK = 0, HDR_INCOMPLETE = 1 };

/*
 * Checks a header read from `name` (`got` bytes of it; the file has
 * `fsize`).  Returns HDR_OK, HDR_INCOMPLETE (short, or version 0 with
 * nothing after the header: creation was interrupted), or TB_EFORMAT with a
 * message naming the file.
 */
static int hdr_check(const tb_store_t *s, const store_hdr_t *h, size_t got,
		     uint64_t fsize, uint64_t magic, uint64_t first_seq,
		     const char *name)
{
	const char *what = magic == STORE_SEG_MAGIC ? "segment" : "index";

	if (got < sizeof(*h) || (h->version == 0 && fsize <= STORE_HDR_LEN))
		return HDR_INCOMPLETE;
	if (h->version != STORE_FORMAT_VERSION)
		return tb_error_set(TB_EFORMAT,
				  "store: %s/%s: format version %u, this build reads %u",
				  s->path, name, h->version, STORE_FORMAT_VERSION);
	if (h->magic != magic)
		return tb_error_set(TB_EFORMAT,
				  "store: %s/%s: not a tickbus store %s file (magic %016" PRIx64 ")",
				  s->path, name, what, h->magic);
	if (h->hdr_len != STORE_HDR_LEN ||
	    h->crc != tb_crc32c(0, h, offsetof(store_hdr_t, crc)))
		return tb_error_set(TB_EFORMAT, "store: %s/%s: corrupt %s header",
				  s->path, name, what);
	if (h->stream_id != s->cfg.stream_id || h->epoch != s->cfg.epoch ||
	    h->first_seq != first_seq)
		return tb_error_set(TB_EFORMAT,
				  "store: %s/%s: header says stream %u epoch %016" PRIx64
				  " first seq %" PRIu64 ", which does not match its place",
				  s->path, name, h->stream_id, h->epoch, h->first_seq);
	return HDR_OK;
}

static ssize_t pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = pread(fd, (uint8_t *)buf + got, len - got,
				  (off_t)(off + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static int pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t w = pwrite(fd, (const uint8_t *)buf + done, len - done,
				   (off_t)(off + done));

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		if (w == 0) {
			errno = EIO;
			return -1;
		}
		done += (size_t)w;
	}
	return 0;
}

/* Writes `iov` whole at `off`, going on after short writes. */
static int pwritev_full(int fd, struct iovec *iov, int cnt, uint64_t off)
{
	while (cnt > 0) {
		ssize_t w = pwritev(fd, iov, cnt, (off_t)off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		if (w == 0) {
			errno = EIO;
			return -1;
		}
		off += (uint64_t)w;
		while (cnt > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* Creates `name` with its header; the version goes in by a second write. */
static int file_create(tb_store_t *s, const char *name, uint64_t magic,
		       uint64_t first_seq, int *fdp)
{
	store_hdr_t h;
	uint32_t version;
	int fd;

	fd = openat(s->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return tb_error_sys(errno, "store: create %s/%s", s->path, name);
	hdr_fill(s, &h, magic, first_seq);
	version = h.version;
	h.version = 0;
	if (pwrite_full(fd, &h, sizeof(h), 0) < 0 ||
	    pwrite_full(fd, &version, sizeof(version),
			offsetof(store_hdr_t, version)) < 0) {
		int err = errno;

		close(fd);
		unlinkat(s->dirfd, name, 0);
		return tb_error_sys(err, "store: write header of %s/%s", s->path,
				  name);
	}
	*fdp = fd;
	return 0;
}

/* ---------------------------------------------------- reading records */

/*
 * Makes file bytes [off, off + need) of segment `key` (open as `fd`, valid
 * up to `end`) available in the window and points *p at them.  Misses read
 * `chunk` bytes or more from `off`, so the window always starts on a
 * record and frames in it are aligned.
 */
static int win_get(tb_store_t *s, int fd, uint64_t key, uint64_t off,
		   size_t need, uint64_t end, size_t chunk, const uint8_t **p)
{
	size_t want;
	ssize_t got;

	if (s->w_key == key && off >= s->w_off &&
	    off + need <= s->w_off + s->w_len) {
		*p = s->buf + (off - s->w_off);
		return 0;
	}
	want = need > chunk ? need : chunk;
	if (want > end - off)
		want = (size_t)(end - off);
	if (want > s->bufcap) {
		uint8_t *b = malloc(want);

		if (!b)
			return tb_error_set(TB_ENOMEM, "store: read buffer of %zu bytes",
					  want);
		free(s->buf);
		s->buf = b;
		s->bufcap = want;
	}
	s->w_key = 0;
	s->st.preads++;
	got = pread_full(fd, s->buf, want, off);
	if (got < 0)
		return tb_error_sys(errno, "store: read %s at offset %" PRIu64,
				  s->path, off);
	if ((size_t)got < need)
		return tb_error_set(TB_EFORMAT,
				  "store: %s: file ends at offset %" PRIu64
				  ", before the %zu bytes expected at %" PRIu64,
				  s->path, off + (uint64_t)got, need, off);
	s->w_key = key;
	s->w_off = off;
	s->w_len = (size_t)got;
	*p = s->buf;
	return 0;
}

enum { REC_OK = 0, REC_BAD = 1 };

/*
 * Decodes the record at `off` of a segment valid up to `end`, which must
 * carry sequence `seq`.  Returns REC_OK with *frame and *space set, REC_BAD
 * with the reason in `why`, or a negative code when the file cannot be read.
 */
static int rec_decode(tb_store_t *s, int fd, uint64_t key, uint64_t off,
		      uint64_t end, uint64_t seq, size_t chunk,
		      const tb_frame_hdr_t **frame, uint32_t *space,
		      char *why, size_t whylen)
{
	const uint8_t *p;
	store_rec_t rh;
	const tb_frame_hdr_t *f;
	uint32_t sp;
	int r;

	if (end - off < sizeof(rh)) {
		snprintf(why, whylen, "%s before sequence %" PRIu64,
			 end == off ? "data ends" : "partial record header", seq);
		return REC_BAD;
	}
	r = win_get(s, fd, key, off, sizeof(rh), end, chunk, &p);
	if (r < 0)
		return r;
	memcpy(&rh, p, sizeof(rh));
	if (rh.len < TB_FRAME_HDR_LEN || rh.len > TB_FRAME_MAX_LEN) {
		snprintf(why, whylen, "impossible record length %u", rh.len);
		return REC_BAD;
	}
	sp = rec_space(rh.len);
	if (sp > end - off) {
		snprintf(why, whylen,
			 "record of %u bytes runs past the end of the data", sp);
		return REC_BAD;
	}
	r = win_get(s, fd, key, off, sp, end, chunk, &p);
	if (r < 0)
		return r;
	f = (const tb_frame_hdr_t *)(p + sizeof(rh));
	if (tb_crc32c(0, f, rh.len) != rh.crc) {
		snprintf(why, whylen, "record checksum mismatch");
		return REC_BAD;
	}
	if (f->length != rh.len || f->seq != seq) {
		snprintf(why, whylen,
			 "record holds sequence %" PRIu64 " length %u where %" PRIu64
			 " was expected", f->seq, f->length, seq);
		return REC_BAD;
	}
	*frame = f;
	*space = sp;
	return REC_OK;
}

/*
 * Walks records from (`off`, `seq`) up to `end`, adding index entries to
 * `idx` by the one rule (I4).  Stops at the end or at the first bad record;
 * *end_off and *next_seq say where.  Returns 0 or a negative code.
 */
static int scan(tb_store_t *s, int fd, uint64_t key, uint64_t off,
		uint64_t seq, uint64_t end, idx_vec_t *idx, uint64_t *end_off,
		uint64_t *next_seq, char *why, size_t whylen)
{
	why[0] = '\0';
	while (off < end) {
		const tb_frame_hdr_t *f;
		uint32_t sp;
		int r = rec_decode(s, fd, key, off, end, seq, STORE_SCAN_CHUNK,
				   &f, &sp, why, whylen);

		if (r < 0)
			return r;
		if (r == REC_BAD)
			break;
		if (idx->n == 0 ||
		    off - idx->e[idx->n - 1].off >= TB_STORE_INDEX_INTERVAL) {
			r = idx_push(idx, seq, off);
			if (r < 0)
				return r;
		}
		off += sp;
		seq++;
	}
	*end_off = off;
	*next_seq = seq;
	return 0;
}

/*
 * Reads the index file of segment `sg` into `v`, keeping the entries that
 * check (CRC, rising, inside the data) up to the first that does not.  Sets
 * *on_disk to the whole entries the file holds, and *hdr_ok to whether the
 * header checked.  A missing file is an empty index.
 */
static int idx_load(tb_store_t *s, int ifd, const seg_t *sg, idx_vec_t *v,
		    size_t *on_disk, int *hdr_ok)
{
	char name[32];
	struct stat st;
	uint8_t *raw = NULL;
	ssize_t got;
	size_t n, i;
	int r;

	*on_disk = 0;
	*hdr_ok = 0;
	v->n = 0;
	if (ifd < 0)
		return 0;
	file_name(name, sg->first_seq, "idx");
	if (fstat(ifd, &st) < 0)
		return tb_error_sys(errno, "store: stat %s/%s", s->path, name);
	if ((uint64_t)st.st_size < STORE_HDR_LEN)
		return 0;
	raw = malloc((size_t)st.st_size);
	if (!raw)
		return tb_error_set(TB_ENOMEM, "store: index %s/%s", s->path, name);
	s->st.preads++;
	got = pread_full(ifd, raw, (size_t)st.st_size, 0);
	if (got < 0) {
		r = tb_error_sys(errno, "store: read %s/%s", s->path, name);
		goto out;
	}
	r = hdr_check(s, (const store_hdr_t *)raw, (size_t)got,
		      (uint64_t)got, STORE_IDX_MAGIC, sg->first_seq, name);
	if (r != HDR_OK) {
		if (r < 0)
			tb_warn("%s; index ignored", tb_errmsg());
		else
			tb_warn("store: %s/%s: incomplete header; index ignored",
				s->path, name);
		r = 0;
		goto out;
	}
	*hdr_ok = 1;
	n = ((size_t)got - STORE_HDR_LEN) / sizeof(store_idx_t);
	*on_disk = n;
	for (i = 0; i < n; i++) {
		store_idx_t e;

		memcpy(&e, raw + STORE_HDR_LEN + i * sizeof(e), sizeof(e));
		if (e.crc != tb_crc32c(0, &e, offsetof(store_idx_t, crc)) ||
		    e.off < STORE_HDR_LEN || e.off >= sg->size ||
		    e.off % STORE_REC_ALIGN || e.seq < sg->first_seq)
			break;
		if (v->n && (e.seq <= v->e[v->n - 1].seq ||
			     e.off <= v->e[v->n - 1].off))
			break;
		r = idx_push(v, e.seq, e.off);
		if (r < 0)
			goto out;
	}
	r = 0;
out:
	free(raw);
	return r;
}

/* ------------------------------------------------------------- segments */

static int seg_push(tb_store_t *s, const seg_t *sg)
{
	if (s->nsegs == s->segcap) {
		size_t cap = s->segcap ? s->segcap * 2 : 16;
		seg_t *n = realloc(s->segs, cap * sizeof(*n));

		if (!n)
			return tb_error_set(TB_ENOMEM, "store: %zu segments", cap);
		s->segs = n;
		s->segcap = cap;
	}
	s->segs[s->nsegs++] = *sg;
	return 0;
}

static void reader_drop(tb_store_t *s)
{
	if (s->rfd >= 0)
		close(s->rfd);
	s->rfd = -1;
	s->r_key = 0;
	s->ridx.n = 0;
}

static void seg_unlink(tb_store_t *s, uint64_t first_seq)
{
	char name[32];

	file_name(name, first_seq, "seg");
	if (unlinkat(s->dirfd, name, 0) < 0 && errno != ENOENT)
		tb_warn("store: unlink %s/%s: %s", s->path, name, strerror(errno));
	file_name(name, first_seq, "idx");
	if (unlinkat(s->dirfd, name, 0) < 0 && errno != ENOENT)
		tb_warn("store: unlink %s/%s: %s", s->path, name, strerror(errno));
}

static int do_sync(tb_store_t *s)
{
	if (!s->dirty || s->afd < 0)
		return 0;
	if (fdatasync(s->afd) < 0)
		return tb_error_sys(errno, "store: fdatasync %s", s->path);
	s->st.syncs++;
	s->dirty = 0;
	s->last_sync_ns = tb_clock_mono_coarse_ns();
	return 0;
}

/* Creates segment `first_seq` and makes it the active one. */
static int seg_create(tb_store_t *s, uint64_t first_seq)
{
	char name[32];
	seg_t sg = {first_seq, STORE_HDR_LEN, STORE_HDR_LEN, 0};
	int fd, ifd = -1, r;

	sg.newest_ns = wall_ns(s);
	file_name(name, first_seq, "seg");
	r = file_create(s, name, STORE_SEG_MAGIC, first_seq, &fd);
	if (r < 0)
		return r;
	file_name(name, first_seq, "idx");
	r = file_create(s, name, STORE_IDX_MAGIC, first_seq, &ifd);
	if (r < 0)
		goto fail;
	if (s->cfg.sync != TB_STORE_SYNC_NONE && fsync(s->dirfd) < 0) {
		r = tb_error_sys(errno, "store: fsync directory %s", s->path);
		goto fail;
	}
	r = seg_push(s, &sg);
	if (r < 0)
		goto fail;
	s->afd = fd;
	s->aifd = ifd;
	s->aidx.n = 0;
	s->bytes += 2 * STORE_HDR_LEN;
	return 0;
fail:
	if (ifd >= 0)
		close(ifd);
	close(fd);
	seg_unlink(s, first_seq);
	return r;
}

/* Seals the active segment and starts one at `first_seq`.  On failure the
 * old segment stays active. */
static int seg_roll(tb_store_t *s, uint64_t first_seq)
{
	int afd = s->afd, aifd = s->aifd, r;

	/* Open repairs only the last segment's index, so a sealed one's index
	 * is made durable with its data. */
	if (s->cfg.sync != TB_STORE_SYNC_NONE) {
		r = do_sync(s);
		if (r < 0)
			return r;
		if (aifd >= 0 && fdatasync(aifd) < 0)
			return tb_error_sys(errno, "store: fdatasync index in %s",
					  s->path);
	}
	r = seg_create(s, first_seq);
	if (r < 0)
		return r;
	s->segs[s->nsegs - 2].newest_ns = wall_ns(s);
	close(afd);
	if (aifd >= 0)
		close(aifd);
	return 0;
}

int tb_store_retain(tb_store_t *s)
{
	uint64_t now, age_ns;
	int deleted = 0;

	if (!s)
		return tb_error_set(TB_EINVAL, "tb_store_retain: NULL store");
	if (s->cfg.read_only)
		return 0;
	now = wall_ns(s);
	age_ns = s->cfg.retain_age_s * 1000000000ull;
	while (s->nsegs > 1) {
		const seg_t *old = &s->segs[0];
		int over = s->cfg.retain_bytes && s->bytes > s->cfg.retain_bytes;
		int stale = s->cfg.retain_age_s && now > old->newest_ns &&
			    now - old->newest_ns > age_ns;

		if (!over && !stale)
			break;
		if (s->r_key == old->first_seq)
			reader_drop(s);
		if (s->w_key == old->first_seq)
			s->w_key = 0;
		seg_unlink(s, old->first_seq);
		s->bytes -= old->size + old->idx_size;
		memmove(&s->segs[0], &s->segs[1], (s->nsegs - 1) * sizeof(seg_t));
		s->nsegs--;
		s->st.segments_deleted++;
		deleted++;
	}
	return deleted;
}

/* ------------------------------------------------------------ open/close */

void tb_store_cfg_init(tb_store_cfg_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->segment_bytes = TB_STORE_SEGMENT_DEFAULT;
	cfg->sync = TB_STORE_SYNC_NONE;
	cfg->sync_interval_ms = TB_STORE_SYNC_INTERVAL_DEFAULT_MS;
}

static int cfg_check(const tb_store_cfg_t *c)
{
	if (!c->dir[0] || strnlen(c->dir, sizeof(c->dir)) == sizeof(c->dir))
		return tb_error_set(TB_EINVAL, "store: dir is empty or unterminated");
	if (c->stream_id == 0)
		return tb_error_set(TB_EINVAL, "store: stream_id must be > 0");
	if (c->segment_bytes &&
	    (c->segment_bytes < TB_STORE_SEGMENT_MIN ||
	     c->segment_bytes > TB_STORE_SEGMENT_MAX))
		return tb_error_set(TB_EINVAL,
				  "store: segment_bytes %" PRIu64 " outside [%llu, %llu]",
				  c->segment_bytes, TB_STORE_SEGMENT_MIN,
				  TB_STORE_SEGMENT_MAX);
	if (c->sync != TB_STORE_SYNC_NONE && c->sync != TB_STORE_SYNC_INTERVAL &&
	    c->sync != TB_STORE_SYNC_BATCH)
		return tb_error_set(TB_EINVAL, "store: unknown sync policy %d",
				  (int)c->sync);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* "<20 digits>.<ext>" -> the number; 0 when the name is not one. */
static uint64_t parse_file_name(const char *name, const char *ext)
{
	uint64_t v = 0;
	int i;

	if (strlen(name) != 21 + strlen(ext) || name[20] != '.' ||
	    strcmp(name + 21, ext) != 0)
		return 0;
	for (i = 0; i < 20; i++) {
		if (name[i] < '0' || name[i] > '9')
			return 0;
		if (v > (UINT64_MAX - 9) / 10)
			return 0;
		v = v * 10 + (uint64_t)(name[i] - '0');
	}
	return v;
}

/* Finds the segment and index files; removes index files without a segment. */
static int list_files(tb_store_t *s)
{
	uint64_t *idx = NULL, v;
	size_t nidx = 0, capidx = 0, i;
	struct dirent *de;
	DIR *d;
	int fd, r = 0;

	fd = dup(s->dirfd);
	if (fd < 0 || !(d = fdopendir(fd))) {
		r = tb_error_sys(errno, "store: list %s", s->path);
		if (fd >= 0)
			close(fd);
		return r;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		if ((v = parse_file_name(de->d_name, "seg"))) {
			seg_t sg = {v, 0, 0, 0};

			r = seg_push(s, &sg);
		} else if ((v = parse_file_name(de->d_name, "idx"))) {
			if (nidx == capidx) {
				uint64_t *n;

				capidx = capidx ? capidx * 2 : 16;
				n = realloc(idx, capidx * sizeof(*n));
				if (!n) {
					r = tb_error_set(TB_ENOMEM, "store: listing");
					break;
				}
				idx = n;
			}
			idx[nidx++] = v;
		}
		if (r < 0)
			break;
	}
	closedir(d);
	if (r == 0) {
		if (s->nsegs)
			qsort(s->segs, s->nsegs, sizeof(seg_t), cmp_u64);
		for (i = 0; i < nidx && !s->cfg.read_only; i++) {
			seg_t key = {idx[i], 0, 0, 0};
			char name[32];

			if (s->nsegs && bsearch(&key, s->segs, s->nsegs,
						sizeof(seg_t), cmp_u64))
				continue;
			file_name(name, idx[i], "idx");
			tb_warn("store: %s/%s has no segment; removed", s->path, name);
			unlinkat(s->dirfd, name, 0);
		}
	}
	free(idx);
	return r;
}

/* Opens segment i, checks its header and takes its size and mtime.  Keeps
 * the fd in *fdp when fdp is not NULL. */
static int seg_load(tb_store_t *s, size_t i, int flags, int *fdp)
{
	seg_t *sg = &s->segs[i];
	char name[32];
	struct stat st;
	store_hdr_t h;
	ssize_t got;
	int fd, r;

	file_name(name, sg->first_seq, "seg");
	fd = openat(s->dirfd, name, flags | O_CLOEXEC);
	if (fd < 0)
		return tb_error_sys(errno, "store: open %s/%s", s->path, name);
	if (fstat(fd, &st) < 0) {
		r = tb_error_sys(errno, "store: stat %s/%s", s->path, name);
		goto out;
	}
	got = pread_full(fd, &h, sizeof(h), 0);
	if (got < 0) {
		r = tb_error_sys(errno, "store: read %s/%s", s->path, name);
		goto out;
	}
	r = hdr_check(s, &h, (size_t)got, (uint64_t)st.st_size, STORE_SEG_MAGIC,
		      sg->first_seq, name);
	if (r == HDR_INCOMPLETE && i + 1 < s->nsegs)
		r = tb_error_set(TB_EFORMAT,
			       "store: %s/%s: incomplete header in a sealed segment",
			       s->path, name);
	if (r != HDR_OK)
		goto out;
	sg->size = (uint64_t)st.st_size;
	sg->newest_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
			(uint64_t)st.st_mtim.tv_nsec;
	file_name(name, sg->first_seq, "idx");
	sg->idx_size = fstatat(s->dirfd, name, &st, 0) == 0 ?
		       (uint64_t)st.st_size : 0;
out:
	if (r == HDR_OK && fdp)
		*fdp = fd;
	else
		close(fd);
	return r;
}

/*
 * Crash recovery of the last segment (its fd is s->afd): index repair, tail
 * scan, cut.  See the essay at the top.
 */
static int recover_active(tb_store_t *s)
{
	seg_t *sg = &s->segs[s->nsegs - 1];
	char sname[32], iname[32], why[160];
	uint64_t off, seq, end_off, next_seq;
	size_t on_disk, kept, n_before;
	int hdr_ok, r, ro = s->cfg.read_only;

	file_name(sname, sg->first_seq, "seg");
	file_name(iname, sg->first_seq, "idx");
	s->aifd = openat(s->dirfd, iname, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (s->aifd < 0 && errno != ENOENT)
		return tb_error_sys(errno, "store: open %s/%s", s->path, iname);
	r = idx_load(s, s->aifd, sg, &s->aidx, &on_disk, &hdr_ok);
	if (r < 0)
		return r;

	/* Entries that passed their own checks must also point at records
	 * that check; drop from the end until one does. */
	while (s->aidx.n) {
		const store_idx_t *e = &s->aidx.e[s->aidx.n - 1];
		const tb_frame_hdr_t *f;
		uint32_t sp;

		r = rec_decode(s, s->afd, sg->first_seq, e->off, sg->size, e->seq,
			       STORE_SCAN_CHUNK, &f, &sp, why, sizeof(why));
		if (r < 0)
			return r;
		if (r == REC_OK)
			break;
		s->aidx.n--;
	}
	kept = s->aidx.n;
	if (kept) {
		off = s->aidx.e[kept - 1].off;
		seq = s->aidx.e[kept - 1].seq;
	} else {
		off = STORE_HDR_LEN;
		seq = sg->first_seq;
	}
	r = scan(s, s->afd, sg->first_seq, off, seq, sg->size, &s->aidx,
		 &end_off, &next_seq, why, sizeof(why));
	if (r < 0)
		return r;
	s->w_key = 0;

	if (end_off < sg->size) {
		tb_warn("store: %s/%s: cut %" PRIu64 " bytes of torn tail at offset %"
			PRIu64 " (%s); last good sequence %" PRIu64 "%s",
			s->path, sname, sg->size - end_off, end_off, why,
			next_seq - 1, ro ? " (read-only: not cut on disk)" : "");
		if (!ro && ftruncate(s->afd, (off_t)end_off) < 0)
			return tb_error_sys(errno, "store: truncate %s/%s", s->path,
					  sname);
		sg->size = end_off;
	}

	/* Make the index file hold exactly aidx: keep the first `kept`
	 * entries on disk, write the rest after them. */
	n_before = on_disk;
	if (!ro && (!hdr_ok || on_disk != s->aidx.n || kept < on_disk ||
		    sg->idx_size != STORE_HDR_LEN + on_disk * sizeof(store_idx_t))) {
		if (!hdr_ok) {
			if (s->aifd >= 0)
				close(s->aifd);
			unlinkat(s->dirfd, iname, 0);
			r = file_create(s, iname, STORE_IDX_MAGIC, sg->first_seq,
					&s->aifd);
			if (r < 0)
				return r;
			kept = 0;
		}
		if (ftruncate(s->aifd, (off_t)(STORE_HDR_LEN +
					       kept * sizeof(store_idx_t))) < 0)
			return tb_error_sys(errno, "store: truncate %s/%s", s->path,
					  iname);
		/* In memory the entries have their on-disk layout. */
		if (s->aidx.n > kept &&
		    pwrite_full(s->aifd, &s->aidx.e[kept],
				(s->aidx.n - kept) * sizeof(store_idx_t),
				STORE_HDR_LEN + kept * sizeof(store_idx_t)) < 0)
			return tb_error_sys(errno, "store: write %s/%s", s->path,
					  iname);
		if (kept < n_before)
			tb_warn("store: %s/%s: index repaired: %zu entries dropped "
				"(past the data or corrupt), %zu rebuilt",
				s->path, iname, n_before - kept, s->aidx.n - kept);
		else
			tb_info("store: %s/%s: %zu index entries rebuilt", s->path,
				iname, s->aidx.n - kept);
	}
	sg->idx_size = STORE_HDR_LEN + s->aidx.n * sizeof(store_idx_t);
	s->last_seq = next_seq - 1;
	return 0;
}

static int store_load(tb_store_t *s)
{
	int ro = s->cfg.read_only, r;
	size_t i;

	r = list_files(s);
	if (r < 0)
		return r;

	/* The last segment: an interrupted creation is removed. */
	while (s->nsegs) {
		size_t last = s->nsegs - 1;

		r = seg_load(s, last, ro ? O_RDONLY : O_RDWR, &s->afd);
		if (r < 0)
			return r;
		if (r == HDR_OK)
			break;
		tb_warn("store: %s/%020" PRIu64 ".seg: incomplete header (creation "
			"was interrupted); %s", s->path, s->segs[last].first_seq,
			ro ? "ignored" : "removed");
		if (!ro)
			seg_unlink(s, s->segs[last].first_seq);
		s->nsegs--;
	}
	for (i = 0; i + 1 < s->nsegs; i++) {
		r = seg_load(s, i, O_RDONLY, NULL);
		if (r < 0)
			return r;
	}
	if (s->nsegs == 0)
		return 0;
	r = recover_active(s);
	if (r < 0)
		return r;

	/* A lone segment with no record is an empty store: any first seq. */
	if (s->nsegs == 1 && s->last_seq < s->segs[0].first_seq) {
		close(s->afd);
		if (s->aifd >= 0)
			close(s->aifd);
		s->afd = s->aifd = -1;
		if (!ro)
			seg_unlink(s, s->segs[0].first_seq);
		s->nsegs = 0;
		s->last_seq = 0;
		s->aidx.n = 0;
		return 0;
	}
	for (i = 0; i < s->nsegs; i++)
		s->bytes += s->segs[i].size + s->segs[i].idx_size;
	return 0;
}

int tb_store_open(tb_store_t **sp, const tb_store_cfg_t *cfg)
{
	tb_store_t *s;
	int r, ro;

	if (!sp || !cfg)
		return tb_error_set(TB_EINVAL, "tb_store_open: NULL argument");
	*sp = NULL;
	r = cfg_check(cfg);
	if (r < 0)
		return tb_error_prepend(r, "tb_store_open");
	s = calloc(1, sizeof(*s));
	if (!s)
		return tb_error_set(TB_ENOMEM, "tb_store_open: out of memory");
	s->cfg = *cfg;
	if (!s->cfg.segment_bytes)
		s->cfg.segment_bytes = TB_STORE_SEGMENT_DEFAULT;
	if (!s->cfg.sync_interval_ms)
		s->cfg.sync_interval_ms = TB_STORE_SYNC_INTERVAL_DEFAULT_MS;
	s->dirfd = s->afd = s->aifd = s->rfd = -1;
	ro = s->cfg.read_only;
	snprintf(s->path, sizeof(s->path), "%s/%" PRIu32 "-%016" PRIx64,
		 s->cfg.dir, s->cfg.stream_id, s->cfg.epoch);

	if (!ro && mkdir(s->cfg.dir, 0755) < 0 && errno != EEXIST) {
		r = tb_error_sys(errno, "tb_store_open: mkdir %s", s->cfg.dir);
		goto fail;
	}
	if (!ro && mkdir(s->path, 0755) < 0 && errno != EEXIST) {
		r = tb_error_sys(errno, "tb_store_open: mkdir %s", s->path);
		goto fail;
	}
	s->dirfd = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0) {
		r = tb_error_sys(errno, "tb_store_open: open %s", s->path);
		goto fail;
	}
	if (flock(s->dirfd, (ro ? LOCK_SH : LOCK_EX) | LOCK_NB) < 0) {
		r = errno == EWOULDBLOCK ?
		    tb_error_set(TB_EBUSY, "tb_store_open: %s is open for writing "
			       "by another process", s->path) :
		    tb_error_sys(errno, "tb_store_open: lock %s", s->path);
		goto fail;
	}
	r = store_load(s);
	if (r < 0) {
		tb_error_prepend(r, "tb_store_open");
		goto fail;
	}
	s->last_sync_ns = tb_clock_mono_coarse_ns();
	r = tb_store_retain(s);
	if (r < 0)
		goto fail;
	*sp = s;
	return 0;
fail:
	tb_store_close(s);
	return r;
}

int tb_store_close(tb_store_t *s)
{
	int r = 0;

	if (!s)
		return 0;
	if (!s->cfg.read_only && s->cfg.sync != TB_STORE_SYNC_NONE)
		r = do_sync(s);
	if (s->afd >= 0)
		close(s->afd);
	if (s->aifd >= 0)
		close(s->aifd);
	reader_drop(s);
	if (s->dirfd >= 0)
		close(s->dirfd);
	free(s->aidx.e);
	free(s->ridx.e);
	free(s->segs);
	free(s->buf);
	free(s);
	return r;
}

/* --------------------------------------------------------------- append */

static int frame_refuse(const tb_store_t *s, const tb_frame_hdr_t *f,
			uint64_t expect)
{
	if (!f)
		return tb_error_set(TB_EINVAL, "tb_store_append: NULL frame");
	if (f->length < TB_FRAME_HDR_LEN || f->length > TB_FRAME_MAX_LEN)
		return tb_error_set(TB_EINVAL, "tb_store_append: frame length %u "
				  "outside [%u, %u]", f->length, TB_FRAME_HDR_LEN,
				  TB_FRAME_MAX_LEN);
	if (tb_frame_check(f, f->length) < 0 || f->type == TB_FRAME_PAD)
		return tb_error_set(TB_EINVAL, "tb_store_append: not a data frame "
				  "(version %u, type %u)", f->version, f->type);
	if (f->stream_id != s->cfg.stream_id)
		return tb_error_set(TB_EINVAL, "tb_store_append: frame of stream %u "
				  "in the store of stream %u", f->stream_id,
				  s->cfg.stream_id);
	if (expect == 0 ? f->seq == 0 : f->seq != expect)
		return tb_error_set(TB_EINVAL, "tb_store_append: sequence %" PRIu64
				  " refused: %s (last stored %" PRIu64 ")", f->seq,
				  f->seq == 0 ? "sequences start at 1" :
				  expect && f->seq < expect ? "duplicate" :
				  "out of order", s->last_seq);
	return 0;
}

int tb_store_append_batch(tb_store_t *s, const tb_frame_hdr_t *const *frames,
			  int n)
{
	static const uint8_t zeros[STORE_REC_ALIGN];
	struct iovec iov[3 * STORE_GROUP_MAX];
	store_rec_t rh[STORE_GROUP_MAX];
	store_idx_t ie[STORE_GROUP_MAX];
	int done = 0, r;

	if (!s || (!frames && n > 0) || n < 0)
		return tb_error_set(TB_EINVAL, "tb_store_append: bad argument");
	if (s->cfg.read_only)
		return tb_error_set(TB_ESTATE, "tb_store_append: store %s is read-only",
				  s->path);
	while (done < n) {
		const tb_frame_hdr_t *f = frames[done];
		uint64_t expect = s->nsegs ? s->last_seq + 1 : 0;
		uint64_t size, first_off, last_idx_off;
		int g = 0, ni = 0, niov = 0;
		seg_t *sg;

		r = frame_refuse(s, f, expect);
		if (r < 0)
			return done ? done : r;
		if (s->nsegs == 0) {
			r = seg_create(s, f->seq);
		} else {
			sg = &s->segs[s->nsegs - 1];
			if (s->last_seq >= sg->first_seq &&
			    sg->size + rec_space(f->length) > s->cfg.segment_bytes)
				r = seg_roll(s, f->seq);
		}
		if (r < 0)
			return done ? done : r;

		/* Gather what fits in this segment and is in order. */
		sg = &s->segs[s->nsegs - 1];
		size = first_off = sg->size;
		last_idx_off = s->aidx.n ? s->aidx.e[s->aidx.n - 1].off : 0;
		while (done + g < n && g < STORE_GROUP_MAX) {
			const tb_frame_hdr_t *fg = frames[done + g];
			uint32_t sp;

			/* A refusal ends the group; the loop's next turn
			 * reports it. */
			if (g && frame_refuse(s, fg, f->seq + (uint64_t)g) < 0) {
				tb_error_clear();
				break;
			}
			sp = rec_space(fg->length);
			if (size > STORE_HDR_LEN &&
			    size + sp > s->cfg.segment_bytes)
				break;
			rh[g].len = fg->length;
			rh[g].crc = tb_crc32c(0, fg, fg->length);
			iov[niov].iov_base = &rh[g];
			iov[niov++].iov_len = sizeof(rh[g]);
			iov[niov].iov_base = (void *)(uintptr_t)fg;
			iov[niov++].iov_len = fg->length;
			if (sp - sizeof(rh[g]) > fg->length) {
				iov[niov].iov_base = (void *)(uintptr_t)zeros;
				iov[niov++].iov_len = sp - sizeof(rh[g]) - fg->length;
			}
			if ((s->aidx.n == 0 && ni == 0) ||
			    size - last_idx_off >= TB_STORE_INDEX_INTERVAL) {
				ie[ni].seq = fg->seq;
				ie[ni].off = (uint32_t)size;
				ie[ni].crc = tb_crc32c(0, &ie[ni],
						       offsetof(store_idx_t, crc));
				ni++;
				last_idx_off = size;
			}
			size += sp;
			g++;
		}

		if (pwritev_full(s->afd, iov, niov, first_off) < 0) {
			r = tb_error_sys(errno, "tb_store_append: write %s/%020" PRIu64
				       ".seg", s->path, sg->first_seq);
			/* Take back a partial write so the file ends on a
			 * record. */
			if (ftruncate(s->afd, (off_t)first_off) < 0)
				tb_warn("store: %s: could not cut a partial "
					"write: %s", s->path, strerror(errno));
			return done ? done : r;
		}
		if (ni && pwrite_full(s->aifd, ie, (size_t)ni * sizeof(ie[0]),
				      STORE_HDR_LEN + s->aidx.n *
				      sizeof(store_idx_t)) < 0)
			tb_warn("store: %s: index write failed (%s); it is "
				"rebuilt at the next open", s->path,
				strerror(errno));
		for (int k = 0; k < ni; k++) {
			r = idx_push(&s->aidx, ie[k].seq, ie[k].off);
			if (r < 0)
				return done + g;
		}
		s->bytes += (size - first_off) + (uint64_t)ni * sizeof(store_idx_t);
		sg->idx_size += (uint64_t)ni * sizeof(store_idx_t);
		sg->size = size;
		s->last_seq = f->seq + (uint64_t)g - 1;
		s->st.appended += (uint64_t)g;
		s->st.bytes_appended += size - first_off;
		s->dirty = 1;
		done += g;
		/* The byte bound holds at every append, not only at rolls. */
		if (s->cfg.retain_bytes && s->bytes > s->cfg.retain_bytes &&
		    s->nsegs > 1)
			tb_store_retain(s);
	}
	if (s->cfg.sync == TB_STORE_SYNC_INTERVAL &&
	    tb_clock_mono_coarse_ns() - s->last_sync_ns >=
	    (uint64_t)s->cfg.sync_interval_ms * 1000000ull) {
		r = do_sync(s);
		if (r < 0)
			return r;
	}
	return done;
}

int tb_store_append(tb_store_t *s, const tb_frame_hdr_t *frame)
{
	int r = tb_store_append_batch(s, &frame, 1);

	return r < 0 ? r : 0;
}

int tb_store_flush(tb_store_t *s)
{
	int r = 0;

	if (!s)
		return tb_error_set(TB_EINVAL, "tb_store_flush: NULL store");
	if (s->cfg.read_only)
		return 0;
	if (s->cfg.sync == TB_STORE_SYNC_BATCH ||
	    (s->cfg.sync == TB_STORE_SYNC_INTERVAL &&
	     tb_clock_mono_coarse_ns() - s->last_sync_ns >=
	     (uint64_t)s->cfg.sync_interval_ms * 1000000ull))
		r = do_sync(s);
	if (r < 0)
		return r;
	r = tb_store_retain(s);
	return r < 0 ? r : 0;
}

/* ----------------------------------------------------------------- read */

/* Opens sealed segment k for reading, with its index. */
static int reader_open(tb_store_t *s, size_t k)
{
	const seg_t *sg = &s->segs[k];
	char name[32];
	size_t on_disk;
	int hdr_ok, ifd, r;

	if (s->r_key == sg->first_seq && s->rfd >= 0)
		return 0;
	reader_drop(s);
	file_name(name, sg->first_seq, "seg");
	s->rfd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (s->rfd < 0)
		return tb_error_sys(errno, "store: open %s/%s", s->path, name);
	file_name(name, sg->first_seq, "idx");
	ifd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (ifd < 0)
		tb_warn("store: %s/%s: %s; reads of this segment scan from "
			"its start", s->path, name, strerror(errno));
	r = idx_load(s, ifd, sg, &s->ridx, &on_disk, &hdr_ok);
	if (ifd >= 0)
		close(ifd);
	if (r < 0) {
		reader_drop(s);
		return r;
	}
	if (hdr_ok && s->ridx.n < on_disk)
		tb_warn("store: %s/%s: %zu of %zu index entries do not check; "
			"reads past them step over more records", s->path, name,
			on_disk - s->ridx.n, on_disk);
	s->r_key = sg->first_seq;
	return 0;
}

int tb_store_read(tb_store_t *s, uint64_t first_seq, int max_count,
		  tb_store_read_fn fn, void *clientd)
{
	uint64_t seq = first_seq;
	int delivered = 0, r = 0, stop = 0;
	size_t k;

	if (!s || !fn || max_count < 1 || first_seq == 0)
		return tb_error_set(TB_EINVAL, "tb_store_read: %s",
				  !s || !fn ? "NULL argument" :
				  first_seq == 0 ? "sequences start at 1" :
				  "max_count must be >= 1");
	if (s->nsegs == 0 || first_seq > s->last_seq)
		return tb_error_set(TB_STORE_NOT_YET, "tb_store_read: sequence %"
				  PRIu64 " is not stored yet (latest is %" PRIu64 ")",
				  first_seq, s->last_seq);
	if (first_seq < s->segs[0].first_seq)
		return tb_error_set(TB_STORE_TOO_OLD, "tb_store_read: sequence %"
				  PRIu64 " is too old (earliest available is %"
				  PRIu64 ")", first_seq, s->segs[0].first_seq);

	for (k = seg_find(s, seq); !stop && delivered < max_count &&
	     seq <= s->last_seq; k++) {
		const seg_t *sg = &s->segs[k];
		uint64_t end_seq = k + 1 < s->nsegs ? s->segs[k + 1].first_seq - 1 :
			s->last_seq;
		const idx_vec_t *idx = &s->aidx;
		const store_idx_t *e;
		uint64_t off, at;
		int fd = s->afd;

		if (k + 1 < s->nsegs) {
			r = reader_open(s, k);
			if (r < 0)
				break;
			idx = &s->ridx;
			fd = s->rfd;
		}
		e = idx_find(idx, seq);
		off = e ? e->off : STORE_HDR_LEN;
		at = e ? e->seq : sg->first_seq;
		while (at <= end_seq && delivered < max_count) {
			const tb_frame_hdr_t *f;
			uint32_t sp;
			char why[160];

			r = rec_decode(s, fd, sg->first_seq, off, sg->size, at,
				       STORE_READ_CHUNK, &f, &sp, why, sizeof(why));
			if (r == REC_BAD)
				r = tb_error_set(TB_EFORMAT, "tb_store_read: %s/%020"
					       PRIu64 ".seg: offset %" PRIu64 ": %s",
					       s->path, sg->first_seq, off, why);
			if (r < 0)
				break;
			s->st.records_examined++;
			if (at >= seq) {
				delivered++;
				if (fn(clientd, f)) {
					stop = 1;
					at++;
					break;
				}
			}
			off += sp;
			at++;
		}
		if (r < 0)
			break;
		seq = at;
	}
	return delivered ? delivered : r;
}

/* -------------------------------------------------------------- queries */

uint64_t tb_store_first_seq(const tb_store_t *s)
{
	return s && s->nsegs ? s->segs[0].first_seq : 0;
}

uint64_t tb_store_last_seq(const tb_store_t *s)
{
	return s && s->nsegs ? s->last_seq : 0;
}

void tb_store_stats(const tb_store_t *s, tb_store_stats_t *st)
{
	*st = s->st;
	st->segments = s->nsegs;
	st->bytes = s->bytes;
}

int tb_store_epochs(const char *dir, uint32_t stream_id, uint64_t *epochs,
		    size_t max)
{
	char prefix[16];
	size_t plen, n = 0, cap = 0;
	uint64_t *all = NULL;
	struct dirent *de;
	DIR *d;
	int r;

	if (!dir || stream_id == 0 || (!epochs && max))
		return tb_error_set(TB_EINVAL, "tb_store_epochs: bad argument");
	d = opendir(dir);
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return tb_error_sys(errno, "tb_store_epochs: open %s", dir);
	}
	plen = (size_t)snprintf(prefix, sizeof(prefix), "%" PRIu32 "-", stream_id);
	while ((de = readdir(d))) {
		const char *h = de->d_name + plen;
		uint64_t v = 0;
		int i;

		if (strncmp(de->d_name, prefix, plen) != 0 || strlen(h) != 16)
			continue;
		for (i = 0; i < 16; i++) {
			char c = h[i];
			int dv = c >= '0' && c <= '9' ? c - '0' :
				 c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

			if (dv < 0)
				break;
			v = (v << 4) | (uint64_t)dv;
		}
		if (i < 16)
			continue;
		if (n == cap) {
			uint64_t *a;

			cap = cap ? cap * 2 : 16;
			a = realloc(all, cap * sizeof(*a));
			if (!a) {
				closedir(d);
				free(all);
				return tb_error_set(TB_ENOMEM, "tb_store_epochs");
			}
			all = a;
		}
		all[n++] = v;
	}
	closedir(d);
	if (n)
		qsort(all, n, sizeof(*all), cmp_u64);
	for (size_t i = 0; i < n && i < max; i++)
		epochs[i] = all[i];
	free(all);
	r = n > INT32_MAX ? INT32_MAX : (int)n;
	return r;
}
