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
 *       quarantine/                   damaged segments set aside (see below)
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
 * corruption.  A record length of 0 is never written: zeros after the last
 * record are room the writer made and had not filled yet (see Appending).
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
 *   I1  Sequences rise across the whole store: segment k holds sequences in
 *       [first_k, first_{k+1} - 1]; the last holds [first_last, last_seq].
 *       Append refuses anything but last_seq + 1, so a writer never leaves
 *       a hole.  A hole exists only where data was damaged: a record inside
 *       a segment whose sequence is above the one expected there (the
 *       sequences between were lost and set aside by a quarantine, below),
 *       or bytes that do not check.  Reads report a hole's exact range as
 *       TB_STORE_LOST and go on after it; they never end at it.
 *   I2  Only the last segment is ever written.  Older ones are sealed: their
 *       size and contents never change until retention deletes them.
 *   I3  Data is written before the index entry that points at it, so after
 *       a process crash an index entry may be missing, never ahead.  (After
 *       a machine crash without sync either file may be short; open repairs
 *       both.)  The index is therefore only an accelerator: every record is
 *       checked by its CRC and expected sequence when read, and a read
 *       starts only from an entry whose record carries exactly the entry's
 *       sequence.  Open, which scans the active segment from its last
 *       entry, also walks the records from the entry before it (or the
 *       first record) and keeps the entry only if the walk lands on it:
 *       an entry pointing at a record that checks inside another record's
 *       payload would start the scan on records no read meets.
 *   I4  Index entries rise strictly in both sequence and offset, and follow
 *       one deterministic rule, so open can regenerate the missing tail of
 *       the index and get exactly what the writer would have written.
 *
 * Appending.  The active segment and its index are mapped MAP_SHARED, and
 * an append is a CRC and a copy into the mapping: no system call.  The
 * files grow ahead of the copy in steps of STORE_GROW (2 MiB) written as
 * zeros with pwritev, which allocates the page cache in large folios, takes
 * the file system's space (a full disk is an error from append, never a
 * SIGBUS from a store into the mapping), and leaves the room readable as
 * "no record yet".  Sealing a segment (roll, close) unmaps it and cuts the
 * files back to their data, so a sealed segment has exactly the bytes the
 * old one-pwrite-per-record writer left.  Write coalescing in a buffer of
 * the process was the other choice; it was not taken because a buffer dies
 * with the process, and a record whose append returned must survive a
 * SIGKILL: a MAP_SHARED page belongs to the page cache, not the process.
 *
 * Crash recovery (open).  Only the last segment can have a torn tail (I2).
 * Open loads its index, drops entries that fail their CRC, break I4 or point
 * at or past the end of the file or at a record that does not check, then
 * walks forward from the last good entry, checking each record.  Where a
 * record does not check, what follows decides what it is:
 *   - zeros to the end: room a writer made and never filled (the normal
 *     state after a SIGKILL); cut quietly.
 *   - nothing that checks to the end: a torn tail; cut (ftruncate) with a
 *     warning giving the bytes cut and the last good sequence.
 *   - a record that checks, with a sequence above the one expected: the
 *     bytes between are damage, not a tail.  The records after them are
 *     kept: the segment is quarantined (below) and the range between is a
 *     hole.
 * The index is then trimmed and completed to match.  A last segment whose
 * header is incomplete (its creation was interrupted) is removed.  Sealed
 * segments are not scanned on open (that would cost the whole store);
 * damage inside them is found when a read reaches it.
 *
 * Damage and holes.  A read that meets a record that does not check looks
 * for the next record that does (8-byte steps: records are aligned; a
 * candidate must have a sane length, this stream's id, a sequence in the
 * segment's range and a matching CRC) and remembers the range between as a
 * hole: [first lost sequence, sequence of the record found), with the bytes
 * to step over.  The read stops before a hole (returning what it delivered)
 * and a read that starts in one returns TB_STORE_LOST, with the range from
 * tb_store_lost(), so the caller can get it elsewhere or report exactly it
 * as lost and go on after it.  Quarantine (writer open, damage before the
 * end of the active segment): the damaged file is linked into quarantine/
 * under its name and the time, its intact records are copied, in order and
 * without the damaged bytes, to a new file that replaces it (rename), and
 * its index is rebuilt.  In the new file the record after the damage
 * carries a sequence above the one expected: the hole, recorded in the
 * data itself.  A crash during quarantine leaves the damaged file in place
 * (the rename is the commit), and the next open quarantines again.
 *
 * Retention.  At open, after a roll, at flush, and at any append that takes
 * the store over its byte bound, whole oldest segments are deleted while
 * the store's bytes exceed retain_bytes or the oldest segment's newest
 * record (its file mtime, or the clock when this process sealed it) is
 * older than retain_age_s.  The segment being appended to is never
 * deleted.  The .seg goes first, then the .idx; an .idx with no .seg is
 * removed at open.  Bytes are those of records and index entries, not the
 * zeroed room ahead of the active segment's last record.
 *
 * Durability.  Once an append returns, the record is in the page cache
 * (through the shared mapping) and survives the process.  Surviving the
 * machine is what fdatasync buys, per the configured policy: on Linux it
 * writes back pages dirtied through a shared mapping as msync(MS_SYNC)
 * would.  The index is never synced on its own account: open rebuilds it.
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
#include <sys/mman.h>
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
/* The active segment grows by this much room at a time: once per ~20,000
 * small records, and at most this much to cut after a crash.  The index
 * grows by 4096 entries (16 MiB of records) at a time.
 *
 * The room is written in pieces, each aligned to its own size: the page
 * cache allocates a folio as large as an aligned write (xfs; ext4 on
 * recent kernels, 6.18 here; elsewhere small folios, as before), and the
 * piece size is a trade between two costs.  Every 4 KiB
 * page of a mapping costs a fault the first time a process touches it;
 * a folio of 2 MiB (STORE_HUGE) placed at a 2 MiB-aligned address is
 * mapped whole by one page-table entry instead, so appends of 64-byte
 * records stop paying a fault per 40 records (under a hypervisor that
 * shadows page tables, a first touch costs ~5 us even after
 * MADV_POPULATE_WRITE, which therefore is not used: with 2 MiB folios
 * bench_store's single 64-byte appends went from 6.3 to 30 M rec/s).  But
 * dirtiness is tracked per folio, so each fdatasync writes back every
 * folio touched whole: with 1 MiB pieces a sync per batch of 64 small
 * records ran 4x slower than with 64 KiB ones (bench_store, durable).
 * Hence STORE_HUGE pieces unless every flush syncs (TB_STORE_SYNC_BATCH),
 * STORE_GROW_PIECE then, and always for the index, which is small. */
#define STORE_HUGE (2u << 20)
#define STORE_GROW STORE_HUGE
#define STORE_GROW_PIECE (64u << 10)
#define STORE_IDX_GROW (64u << 10)
/* Index entries a read tries, going back, before it starts from the
 * segment's first record: entries that pass their own CRC but point at
 * the wrong record are damage. */
#define STORE_IDX_TRIES 4
#define STORE_QUARANTINE "quarantine"

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

/* Most index entries a segment of `size` bytes can hold under I4. */
static inline uint64_t idx_max_entries(uint64_t size)
{
	return 2 + size / TB_STORE_INDEX_INTERVAL;
}

/* ---------------------------------------------------------------- state */

typedef struct seg {
	uint64_t first_seq;
	uint64_t size;      /* valid bytes of the .seg, header included */
	uint64_t idx_size;  /* valid bytes of the .idx */
	uint64_t newest_ns; /* wall time of its newest record */
} seg_t;

typedef struct idx_vec {
	store_idx_t *e;
	size_t n, cap;
} idx_vec_t;

enum hole_kind {
	HOLE_DAMAGE = 0,   /* bytes that do not check */
	HOLE_RECORDED = 1, /* a record above the sequence expected */
	HOLE_MISSING = 2,  /* the segment's data ends before its range does */
};

/* Sequences [first, next) of segment `key` cannot be read: a reader at
 * offset `off` expecting `first` steps to `next_off`, where record `next`
 * starts (or the data ends).  Kept sorted by (key, off), which also sorts
 * them by sequence; they never overlap. */
typedef struct hole {
	uint64_t key;
	uint64_t first, next;
	uint64_t off, next_off;
	int kind;
} hole_t;

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
	size_t idx_on_file;  /* of aidx, the entries its file holds */

	/* The active segment mapped for appends (writer only, from the first
	 * append); NULL: not mapped.  The files are afile_len and ifile_len
	 * long: data, then zeroed room. */
	uint8_t *amap, *imap;
	uint64_t amap_len, imap_len, afile_len, ifile_len;
	uint64_t amap_key;   /* first_seq of the mapped segment */

	uint64_t r_key;      /* first_seq of the sealed segment whose fd and
			        index are cached for reading; 0: none */
	int rfd;
	idx_vec_t ridx;

	uint8_t *buf;        /* read window: file bytes [w_off, w_off+w_len)
			        of the segment whose first_seq is w_key */
	size_t bufcap, w_len;
	uint64_t w_key, w_off;

	hole_t *holes;       /* known holes, sorted by (key, off) */
	size_t nholes, holecap;

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

static int idx_reserve(idx_vec_t *v, size_t cap)
{
	store_idx_t *e;

	if (cap <= v->cap)
		return 0;
	e = realloc(v->e, cap * sizeof(*e));
	if (!e)
		return tb_error_set(TB_ENOMEM, "store: index of %zu entries", cap);
	v->e = e;
	v->cap = cap;
	return 0;
}

static int idx_push(idx_vec_t *v, uint64_t seq, uint64_t off)
{
	store_idx_t *e;

	if (v->n == v->cap) {
		int r = idx_reserve(v, v->cap ? v->cap * 2 : 256);

		if (r < 0)
			return r;
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

/* --------------------------------------------------------------- holes */

/* Index of the first hole at or after (key, off). */
static size_t hole_lower(const tb_store_t *s, uint64_t key, uint64_t off)
{
	size_t lo = 0, hi = s->nholes;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const hole_t *h = &s->holes[mid];

		if (h->key < key || (h->key == key && h->off < off))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The hole that loses `seq`, or NULL.  Holes that lose nothing (bytes
 * stepped over between two consecutive records) are never the answer. */
static const hole_t *hole_of_seq(const tb_store_t *s, uint64_t seq)
{
	size_t lo = 0, hi = s->nholes;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->holes[mid].first <= seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	while (lo-- > 0) {
		const hole_t *h = &s->holes[lo];

		if (h->next > h->first)
			return seq < h->next ? h : NULL;
	}
	return NULL;
}

static const char *hole_why(int kind)
{
	return kind == HOLE_RECORDED ? "lost before a quarantine; recorded in the segment" :
	       kind == HOLE_MISSING ? "the segment's data ends before them" :
	       "records that do not check";
}

/* Adds `h` in order (nothing if a hole starts at the same place); returns
 * its index, or a negative code. */
static int hole_add(tb_store_t *s, const hole_t *h, size_t *at)
{
	size_t i = hole_lower(s, h->key, h->off);

	if (i < s->nholes && s->holes[i].key == h->key && s->holes[i].off == h->off) {
		*at = i;
		return 0;
	}
	if (s->nholes == s->holecap) {
		size_t cap = s->holecap ? s->holecap * 2 : 16;
		hole_t *n = realloc(s->holes, cap * sizeof(*n));

		if (!n)
			return tb_error_set(TB_ENOMEM, "store: %zu holes", cap);
		s->holes = n;
		s->holecap = cap;
	}
	memmove(&s->holes[i + 1], &s->holes[i], (s->nholes - i) * sizeof(*h));
	s->holes[i] = *h;
	s->nholes++;
	if (h->next > h->first) {
		s->st.holes++;
		s->st.records_lost += h->next - h->first;
	}
	*at = i;
	return 0;
}

/* Forgets the holes of segment `key` (deleted, or rewritten). */
static void hole_drop_key(tb_store_t *s, uint64_t key)
{
	size_t a = hole_lower(s, key, 0), b = a;

	while (b < s->nholes && s->holes[b].key == key)
		b++;
	if (a == b)
		return;
	memmove(&s->holes[a], &s->holes[b], (s->nholes - b) * sizeof(hole_t));
	s->nholes -= b - a;
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

/* ----------------------------------------------------------------- I/O */

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

/* Extends `fd` from *len to `to` with zeros (the room appends fill), in
 * writes of at most `piece` bytes (a power of two, at most STORE_HUGE)
 * that end on a multiple of it, so that each full one is one folio.  A
 * write repeats one block of zeros as often as it needs: a process that
 * reads 2 MiB of .bss the first time faults in 512 pages to do it.  On
 * failure *len says how far it got and errno why. */
static int zero_extend(int fd, uint64_t *len, uint64_t to, uint32_t piece)
{
	static const uint8_t zeros[STORE_GROW_PIECE]; /* .bss */
	struct iovec v[STORE_HUGE / STORE_GROW_PIECE];

	while (*len < to) {
		uint64_t n = piece - (*len & (piece - 1)), left;
		ssize_t w;
		int k = 0;

		if (n > to - *len)
			n = to - *len;
		for (left = n; left; left -= v[k++].iov_len) {
			v[k].iov_base = (void *)zeros;
			v[k].iov_len = left < sizeof(zeros) ? (size_t)left :
				       sizeof(zeros);
		}
		w = pwritev(fd, v, k, (off_t)*len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = ENOSPC;
			return -1;
		}
		*len += (uint64_t)w;
	}
	return 0;
}

/* Copies file bytes [from, from + len) of `in` to `out` at `to`. */
static int copy_bytes(int in, uint64_t from, int out, uint64_t to, uint64_t len)
{
	uint8_t *b = NULL;

	while (len) {
		loff_t a = (loff_t)from, z = (loff_t)to;
		ssize_t n = copy_file_range(in, &a, out, &z,
					    len < (1u << 30) ? (size_t)len : (1u << 30), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		from += (uint64_t)n;
		to += (uint64_t)n;
		len -= (uint64_t)n;
	}
	/* Where copy_file_range cannot (another file system, an old
	 * kernel), through a buffer. */
	while (len) {
		size_t n = len < STORE_SCAN_CHUNK ? (size_t)len : STORE_SCAN_CHUNK;
		ssize_t got;

		if (!b && !(b = malloc(STORE_SCAN_CHUNK))) {
			errno = ENOMEM;
			return -1;
		}
		got = pread_full(in, b, n, from);
		if (got < 0 || pwrite_full(out, b, (size_t)got, to) < 0) {
			free(b);
			return -1;
		}
		if ((size_t)got < n) {
			free(b);
			errno = EIO;
			return -1;
		}
		from += n;
		to += n;
		len -= n;
	}
	free(b);
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
 * up to `end`, off <= end) available and points *p at them: in the active
 * segment's mapping when it is mapped, else in the window.  Misses read
 * `chunk` bytes or more from `off`, so the window always starts on a
 * record and frames in it are aligned.
 */
static int win_get_avail(tb_store_t *s, int fd, uint64_t key, uint64_t off,
			 size_t need, uint64_t end, size_t chunk,
			 const uint8_t **p, size_t *avail)
{
	size_t want;
	ssize_t got;

	if (s->amap && key == s->amap_key && off + need <= s->afile_len) {
		*p = s->amap + off;
		*avail = (size_t)(s->afile_len - off);
		return 0;
	}
	if (s->w_key == key && off >= s->w_off &&
	    off + need <= s->w_off + s->w_len) {
		*p = s->buf + (off - s->w_off);
		*avail = s->w_len - (size_t)(off - s->w_off);
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
	*avail = s->w_len;
	return 0;
}

/* As win_get_avail, when the bytes past `need` do not matter. */
static int win_get(tb_store_t *s, int fd, uint64_t key, uint64_t off,
		   size_t need, uint64_t end, size_t chunk, const uint8_t **p)
{
	size_t avail;

	return win_get_avail(s, fd, key, off, need, end, chunk, p, &avail);
}


enum { REC_OK = 0, REC_BAD = 1, REC_JUMP = 2 };

/*
 * Decodes the record at `off` of segment `key` (data valid up to `end`),
 * which should carry sequence `seq`.  Returns REC_OK with *frame and *space
 * set; REC_JUMP, the same, when the record checks but carries a sequence in
 * (seq, max_seq] (a recorded hole before it); REC_BAD with the reason in
 * `why`; or a negative code when the file cannot be read.
 */
static int rec_decode(tb_store_t *s, int fd, uint64_t key, uint64_t off,
		      uint64_t end, uint64_t seq, uint64_t max_seq, size_t chunk,
		      const tb_frame_hdr_t **frame, uint32_t *space,
		      char *why, size_t whylen)
{
	const uint8_t *p;
	store_rec_t rh;
	const tb_frame_hdr_t *f;
	size_t avail;
	uint32_t sp;
	int r;

	if (end - off < sizeof(rh)) {
		snprintf(why, whylen, "%s before sequence %" PRIu64,
			 end == off ? "data ends" : "partial record header", seq);
		return REC_BAD;
	}
	r = win_get_avail(s, fd, key, off, sizeof(rh), end, chunk, &p, &avail);
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
	/* Mostly the whole record came with its header. */
	if (tb_unlikely(sp > avail)) {
		r = win_get(s, fd, key, off, sp, end, chunk, &p);
		if (r < 0)
			return r;
	}
	f = (const tb_frame_hdr_t *)(p + sizeof(rh));
	if (tb_crc32c(0, f, rh.len) != rh.crc) {
		snprintf(why, whylen, "record checksum mismatch");
		return REC_BAD;
	}
	if (f->length != rh.len || f->stream_id != s->cfg.stream_id ||
	    f->version != TB_FRAME_VERSION || f->seq < seq || f->seq > max_seq) {
		snprintf(why, whylen,
			 "record holds sequence %" PRIu64 " length %u stream %u where %"
			 PRIu64 " was expected", f->seq, f->length, f->stream_id, seq);
		return REC_BAD;
	}
	*frame = f;
	*space = sp;
	return f->seq == seq ? REC_OK : REC_JUMP;
}

/*
 * After a record that does not check, finds the first record in [from,
 * limit) that does and carries a sequence in [min_seq, max_seq].  Returns
 * 1 with its offset and sequence, 0 when there is none, or a negative code.
 * Candidates are the 8-byte aligned offsets; most fail on their length or
 * stream id before any CRC is computed.
 */
static int resync(tb_store_t *s, int fd, uint64_t key, uint64_t from,
		  uint64_t limit, uint64_t min_seq, uint64_t max_seq,
		  uint64_t *at_off, uint64_t *at_seq)
{
	const size_t probe = sizeof(store_rec_t) + TB_FRAME_HDR_LEN;
	char why[160];

	for (uint64_t o = from; o < limit && limit - o >= probe;
	     o += STORE_REC_ALIGN) {
		const tb_frame_hdr_t *f;
		const uint8_t *p;
		store_rec_t rh;
		tb_frame_hdr_t fh;
		uint32_t sp;
		int r = win_get(s, fd, key, o, probe, limit, STORE_SCAN_CHUNK, &p);

		if (r < 0)
			return r;
		memcpy(&rh, p, sizeof(rh));
		if (rh.len < TB_FRAME_HDR_LEN || rh.len > TB_FRAME_MAX_LEN ||
		    rec_space(rh.len) > limit - o)
			continue;
		memcpy(&fh, p + sizeof(rh), sizeof(fh));
		if (fh.length != rh.len || fh.stream_id != s->cfg.stream_id ||
		    fh.seq < min_seq || fh.seq > max_seq)
			continue;
		r = rec_decode(s, fd, key, o, limit, fh.seq, fh.seq,
			       STORE_SCAN_CHUNK, &f, &sp, why, sizeof(why));
		if (r < 0)
			return r;
		if (r == REC_OK) {
			*at_off = o;
			*at_seq = fh.seq;
			return 1;
		}
	}
	return 0;
}

/* 1 when file bytes [off, end) are all zero, 0 if not, or a negative code. */
static int zeros_to_end(tb_store_t *s, int fd, uint64_t key, uint64_t off,
			uint64_t end)
{
	while (off < end) {
		size_t n = end - off < STORE_SCAN_CHUNK ? (size_t)(end - off) :
			   STORE_SCAN_CHUNK;
		const uint8_t *p;
		int r = win_get(s, fd, key, off, n, end, STORE_SCAN_CHUNK, &p);

		if (r < 0)
			return r;
		for (size_t i = 0; i < n; i++)
			if (p[i])
				return 0;
		off += n;
	}
	return 1;
}

enum { TAIL_NONE = 0, TAIL_ZERO = 1, TAIL_TORN = 2 };

typedef struct scan_res {
	uint64_t end_off;  /* after the last record that checks */
	uint64_t next_seq; /* the sequence after it */
	int tail;          /* what follows end_off: TAIL_* */
	char why[160];     /* why the torn tail does not check */
	size_t damaged;    /* damaged places met (holes of kind DAMAGE) */
	uint64_t dmg_bytes, dmg_first, dmg_last; /* their bytes and first and
						    last lost sequence */
} scan_res_t;

/*
 * The open-time walk of the active segment `key` from (`off`, `seq`) to
 * `end`: adds index entries to `idx` by the one rule (I4), the holes met to
 * the store's table, and says in `res` where the data ends and what
 * follows.  Returns 0 or a negative code.
 */
static int scan(tb_store_t *s, int fd, uint64_t key, uint64_t off,
		uint64_t seq, uint64_t end, idx_vec_t *idx, scan_res_t *res)
{
	memset(res, 0, sizeof(*res));
	while (off < end) {
		const tb_frame_hdr_t *f;
		uint64_t y, q;
		uint32_t sp;
		size_t at;
		hole_t h;
		int r = rec_decode(s, fd, key, off, end, seq, UINT64_MAX - 1,
				   STORE_SCAN_CHUNK, &f, &sp, res->why,
				   sizeof(res->why));

		if (r < 0)
			return r;
		if (r == REC_JUMP) {
			h = (hole_t){key, seq, f->seq, off, off, HOLE_RECORDED};
			seq = f->seq;
			r = hole_add(s, &h, &at);
			if (r < 0)
				return r;
			continue;
		}
		if (r == REC_OK) {
			if (idx->n == 0 ||
			    off - idx->e[idx->n - 1].off >= TB_STORE_INDEX_INTERVAL) {
				r = idx_push(idx, seq, off);
				if (r < 0)
					return r;
			}
			off += sp;
			seq++;
			continue;
		}
		r = zeros_to_end(s, fd, key, off, end);
		if (r < 0)
			return r;
		if (r == 1) {
			res->tail = TAIL_ZERO;
			break;
		}
		r = resync(s, fd, key, off + STORE_REC_ALIGN, end, seq,
			   UINT64_MAX - 1, &y, &q);
		if (r < 0)
			return r;
		if (r == 0) {
			res->tail = TAIL_TORN;
			break;
		}
		h = (hole_t){key, seq, q, off, y, HOLE_DAMAGE};
		r = hole_add(s, &h, &at);
		if (r < 0)
			return r;
		if (!res->damaged++)
			res->dmg_first = seq;
		if (q > seq)
			res->dmg_last = q - 1;
		res->dmg_bytes += y - off;
		off = y;
		seq = q;
	}
	res->end_off = off;
	res->next_seq = seq;
	return 0;
}

/*
 * Reads the index file of segment `sg` into `v`, keeping the entries that
 * check (CRC, rising by at least the interval, inside the data) up to the
 * first that does not.  Sets *on_disk to the entries the file holds before
 * its zeroed room, and *hdr_ok to whether the header checked.  A missing
 * file is an empty index.  Reads no more than a segment of sg->size bytes
 * can need, whatever the file's length.
 */
static int idx_load(tb_store_t *s, int ifd, const seg_t *sg, idx_vec_t *v,
		    size_t *on_disk, int *hdr_ok)
{
	char name[32];
	struct stat st;
	uint8_t *raw = NULL;
	uint64_t len;
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
	len = STORE_HDR_LEN + idx_max_entries(sg->size) * sizeof(store_idx_t);
	if ((uint64_t)st.st_size < len)
		len = (uint64_t)st.st_size;
	raw = malloc((size_t)len);
	if (!raw)
		return tb_error_set(TB_ENOMEM, "store: index %s/%s", s->path, name);
	s->st.preads++;
	got = pread_full(ifd, raw, (size_t)len, 0);
	if (got < 0) {
		r = tb_error_sys(errno, "store: read %s/%s", s->path, name);
		goto out;
	}
	r = hdr_check(s, (const store_hdr_t *)raw, (size_t)got,
		      (uint64_t)st.st_size, STORE_IDX_MAGIC, sg->first_seq, name);
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
	/* Zeroed room after the entries is not corruption. */
	while (n) {
		static const store_idx_t zero;

		if (memcmp(raw + STORE_HDR_LEN + (n - 1) * sizeof(zero), &zero,
			   sizeof(zero)) != 0)
			break;
		n--;
	}
	*on_disk = n;
	for (i = 0; i < n; i++) {
		store_idx_t e;

		memcpy(&e, raw + STORE_HDR_LEN + i * sizeof(e), sizeof(e));
		if (e.crc != tb_crc32c(0, &e, offsetof(store_idx_t, crc)) ||
		    e.off < STORE_HDR_LEN || e.off >= sg->size ||
		    e.off % STORE_REC_ALIGN || e.seq < sg->first_seq)
			break;
		if (v->n && (e.seq <= v->e[v->n - 1].seq ||
			     e.off <= v->e[v->n - 1].off ||
			     e.off - v->e[v->n - 1].off < TB_STORE_INDEX_INTERVAL))
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

/* Maps `len` bytes of `fd` shared and writable at an address that is a
 * multiple of STORE_HUGE, so that the file's 2 MiB folios can be mapped
 * whole (see STORE_GROW): a reservation of len + STORE_HUGE, the file
 * mapped over its first aligned address, the ends given back. */
static void *map_aligned(int fd, uint64_t len)
{
	size_t span = ((size_t)len + 4095) & ~(size_t)4095;
	uint8_t *r, *a;
	void *m;

	r = mmap(NULL, span + STORE_HUGE, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return MAP_FAILED;
	a = (uint8_t *)(((uintptr_t)r + STORE_HUGE - 1) &
			~(uintptr_t)(STORE_HUGE - 1));
	m = mmap(a, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		 fd, 0);
	if (m == MAP_FAILED) {
		int e = errno;

		munmap(r, span + STORE_HUGE);
		errno = e;
		return MAP_FAILED;
	}
	if (a > r)
		munmap(r, (size_t)(a - r));
	if (r + span + STORE_HUGE > a + span)
		munmap(a + span, (size_t)(r + STORE_HUGE - a));
	return m;
}

/*
 * Maps the active segment and its index for appends, room for a record of
 * `sp` bytes included (an empty segment takes a first record larger than
 * segment_bytes).  The files stay as long as they are; active_grow makes
 * room.
 */
static int active_map(tb_store_t *s, uint32_t sp)
{
	seg_t *sg = &s->segs[s->nsegs - 1];
	uint64_t len = s->cfg.segment_bytes, ilen;
	struct stat st, ist;
	void *m, *im;
	int r;

	if (sg->size + sp > len)
		len = sg->size + sp;
	ilen = STORE_HDR_LEN + idx_max_entries(len) * sizeof(store_idx_t);
	if (fstat(s->afd, &st) < 0 || fstat(s->aifd, &ist) < 0)
		return tb_error_sys(errno, "store: stat the active segment of %s",
				  s->path);
	r = idx_reserve(&s->aidx, (size_t)idx_max_entries(len));
	if (r < 0)
		return r;
	m = map_aligned(s->afd, len);
	if (m == MAP_FAILED)
		return tb_error_sys(errno, "store: map %s/%020" PRIu64 ".seg",
				  s->path, sg->first_seq);
	im = mmap(NULL, (size_t)ilen, PROT_READ | PROT_WRITE, MAP_SHARED, s->aifd, 0);
	if (im == MAP_FAILED) {
		r = tb_error_sys(errno, "store: map %s/%020" PRIu64 ".idx", s->path,
			       sg->first_seq);
		munmap(m, (size_t)len);
		return r;
	}
	s->amap = m;
	s->amap_len = len;
	s->amap_key = sg->first_seq;
	s->afile_len = (uint64_t)st.st_size;
	s->imap = im;
	s->imap_len = ilen;
	s->ifile_len = (uint64_t)ist.st_size;
	return 0;
}

/* Unmaps the active segment and cuts its files back to what they hold. */
static void active_unmap(tb_store_t *s)
{
	const seg_t *sg = &s->segs[s->nsegs - 1];
	uint64_t ilen = STORE_HDR_LEN + s->idx_on_file * sizeof(store_idx_t);

	if (!s->amap)
		return;
	munmap(s->amap, (size_t)s->amap_len);
	munmap(s->imap, (size_t)s->imap_len);
	s->amap = s->imap = NULL;
	if (s->afile_len > sg->size && ftruncate(s->afd, (off_t)sg->size) < 0)
		tb_warn("store: %s/%020" PRIu64 ".seg: cut the room after the "
			"data: %s", s->path, sg->first_seq, strerror(errno));
	if (s->ifile_len > ilen && ftruncate(s->aifd, (off_t)ilen) < 0)
		tb_warn("store: %s/%020" PRIu64 ".idx: cut the room after the "
			"entries: %s", s->path, sg->first_seq, strerror(errno));
}

/* Makes the active segment's file at least `need` bytes long. */
static int active_grow(tb_store_t *s, uint64_t need)
{
	uint64_t to = (need + STORE_GROW - 1) / STORE_GROW * STORE_GROW;

	if (to > s->amap_len)
		to = s->amap_len;
	if (zero_extend(s->afd, &s->afile_len, to,
			s->cfg.sync == TB_STORE_SYNC_BATCH ? STORE_GROW_PIECE :
			STORE_HUGE) < 0 && s->afile_len < need)
		return tb_error_sys(errno, "tb_store_append: make room in %s/%020"
				  PRIu64 ".seg", s->path, s->amap_key);
	return 0;
}

/* Adds the index entry (seq, off) of the active segment: in memory, and
 * in its file unless that could not grow (then open rebuilds it). */
static int idx_add(tb_store_t *s, uint64_t seq, uint64_t off)
{
	seg_t *sg = &s->segs[s->nsegs - 1];
	uint64_t need = STORE_HDR_LEN + (s->idx_on_file + 1) * sizeof(store_idx_t);
	int r = idx_push(&s->aidx, seq, off);

	if (r < 0)
		return r;
	if (s->idx_on_file + 1 != s->aidx.n || need > s->imap_len)
		return 0;
	if (need > s->ifile_len) {
		uint64_t to = (need + STORE_IDX_GROW - 1) / STORE_IDX_GROW *
			      STORE_IDX_GROW;

		if (to > s->imap_len)
			to = s->imap_len;
		if (zero_extend(s->aifd, &s->ifile_len, to,
				STORE_GROW_PIECE) < 0 &&
		    s->ifile_len < need) {
			tb_warn("store: %s: index write failed (%s); it is rebuilt "
				"at the next open", s->path, strerror(errno));
			return 0;
		}
	}
	memcpy(s->imap + need - sizeof(store_idx_t), &s->aidx.e[s->aidx.n - 1],
	       sizeof(store_idx_t));
	s->idx_on_file++;
	sg->idx_size += sizeof(store_idx_t);
	s->bytes += sizeof(store_idx_t);
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
	s->idx_on_file = 0;
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

	active_unmap(s);
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
		hole_drop_key(s, old->first_seq);
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
		uint64_t d = (uint64_t)(name[i] - '0');

		if (name[i] < '0' || name[i] > '9')
			return 0;
		/* Exactly: a first sequence up to UINT64_MAX - 1 has a name. */
		if (v > (UINT64_MAX - d) / 10)
			return 0;
		v = v * 10 + d;
	}
	return v;
}

/* Finds the segment and index files; removes index files without a segment
 * and the leftovers of an interrupted quarantine. */
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
		} else if (!s->cfg.read_only &&
			   parse_file_name(de->d_name, "seg.tmp")) {
			unlinkat(s->dirfd, de->d_name, 0);
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
	if (!S_ISREG(st.st_mode)) {
		r = tb_error_set(TB_EFORMAT, "store: %s/%s is not a regular file",
			       s->path, name);
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
 * Quarantine of the active segment `sg` (open as s->afd), which has damage
 * before the end of its data at `end_off`: the damaged file is linked into
 * quarantine/, and a copy of its intact records (every byte outside the
 * holes of kind DAMAGE, up to end_off) replaces it.  Its index is removed:
 * the caller rebuilds it from the new file.  See the essay.
 */
static int quarantine(tb_store_t *s, const seg_t *sg, uint64_t end_off,
		      char *qname, size_t qlen)
{
	char sname[32], iname[32], tname[40];
	uint64_t src = STORE_HDR_LEN, dst = STORE_HDR_LEN;
	size_t i = hole_lower(s, sg->first_seq, 0);
	int tfd, r = 0;

	file_name(sname, sg->first_seq, "seg");
	file_name(iname, sg->first_seq, "idx");
	file_name(tname, sg->first_seq, "seg.tmp");
	unlinkat(s->dirfd, tname, 0);
	r = file_create(s, tname, STORE_SEG_MAGIC, sg->first_seq, &tfd);
	if (r < 0)
		return r;
	for (;; i++) {
		const hole_t *h = i < s->nholes && s->holes[i].key == sg->first_seq ?
				  &s->holes[i] : NULL;
		uint64_t upto = h ? h->off : end_off;

		if (h && h->kind != HOLE_DAMAGE)
			continue;
		if (upto > src && copy_bytes(s->afd, src, tfd, dst, upto - src) < 0) {
			r = tb_error_sys(errno, "store: copy the intact records of "
				       "%s/%s", s->path, sname);
			goto fail;
		}
		dst += upto - src;
		if (!h)
			break;
		src = h->next_off;
	}
	if (s->cfg.sync != TB_STORE_SYNC_NONE && fdatasync(tfd) < 0) {
		r = tb_error_sys(errno, "store: fdatasync %s/%s", s->path, tname);
		goto fail;
	}
	if (mkdirat(s->dirfd, STORE_QUARANTINE, 0755) < 0 && errno != EEXIST) {
		r = tb_error_sys(errno, "store: mkdir %s/" STORE_QUARANTINE, s->path);
		goto fail;
	}
	snprintf(qname, qlen, STORE_QUARANTINE "/%s.%" PRIu64, sname, wall_ns(s));
	if (linkat(s->dirfd, sname, s->dirfd, qname, 0) < 0) {
		/* No hard links here: a copy, then. */
		int qfd = openat(s->dirfd, qname, O_WRONLY | O_CREAT | O_EXCL |
				 O_CLOEXEC, 0644);
		struct stat st;

		if (qfd < 0 || fstat(s->afd, &st) < 0 ||
		    copy_bytes(s->afd, 0, qfd, 0, (uint64_t)st.st_size) < 0) {
			r = tb_error_sys(errno, "store: set %s/%s aside as %s",
				       s->path, sname, qname);
			if (qfd >= 0)
				close(qfd);
			goto fail;
		}
		close(qfd);
	}
	if (unlinkat(s->dirfd, iname, 0) < 0 && errno != ENOENT) {
		r = tb_error_sys(errno, "store: unlink %s/%s", s->path, iname);
		goto fail;
	}
	/* The commit: the intact records take the damaged file's place. */
	if (renameat(s->dirfd, tname, s->dirfd, sname) < 0) {
		r = tb_error_sys(errno, "store: rename %s/%s", s->path, tname);
		goto fail;
	}
	close(tfd);
	if (s->cfg.sync != TB_STORE_SYNC_NONE && fsync(s->dirfd) < 0)
		return tb_error_sys(errno, "store: fsync directory %s", s->path);
	s->st.segments_quarantined++;
	return 0;
fail:
	close(tfd);
	unlinkat(s->dirfd, tname, 0);
	return r;
}

/* 1 when the active segment's index entry `i` lies on its record chain:
 * walked record by record from the entry before it (or the segment's
 * first record), the chain lands exactly on the entry's offset and
 * sequence; 0 when it does not; a negative code when the file cannot be
 * read.  An entry that checks and points at a record that checks, but
 * inside another record's payload (a forgery: two CRC32C matches), would
 * otherwise start open's scan on records the reads, which walk the
 * chain, never meet.  One interval of records (TB_STORE_INDEX_INTERVAL)
 * a call.  Open only. */
static int idx_on_chain(tb_store_t *s, const seg_t *sg, size_t i)
{
	const store_idx_t *e = &s->aidx.e[i];
	uint64_t off = i ? s->aidx.e[i - 1].off : STORE_HDR_LEN;
	uint64_t at = i ? s->aidx.e[i - 1].seq : sg->first_seq;
	char why[160];

	while (off < e->off && at <= e->seq) {
		const tb_frame_hdr_t *f;
		uint32_t sp;
		int r = rec_decode(s, s->afd, sg->first_seq, off, sg->size, at,
				   e->seq, STORE_SCAN_CHUNK, &f, &sp, why,
				   sizeof(why));

		if (r < 0)
			return r;
		if (r != REC_OK && r != REC_JUMP)
			return 0;
		off += sp;
		at = f->seq + 1;
	}
	return off == e->off && at == e->seq;
}

/*
 * Crash recovery of the last segment (its fd is s->afd): index repair, tail
 * scan, cut, and the quarantine of damage before the end.  See the essay at
 * the top.
 */
static int recover_active(tb_store_t *s, int may_quarantine)
{
	seg_t *sg = &s->segs[s->nsegs - 1];
	uint64_t key = sg->first_seq;
	char sname[32], iname[32], why[160];
	uint64_t off, seq;
	size_t on_disk, kept, n_before;
	scan_res_t res;
	int hdr_ok, r, ro = s->cfg.read_only, quarantining;

	file_name(sname, key, "seg");
	file_name(iname, key, "idx");
	s->aifd = openat(s->dirfd, iname, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (s->aifd < 0 && errno != ENOENT)
		return tb_error_sys(errno, "store: open %s/%s", s->path, iname);
	r = idx_load(s, s->aifd, sg, &s->aidx, &on_disk, &hdr_ok);
	if (r < 0)
		return r;

	/* Entries that passed their own checks must also point at records
	 * that carry exactly their sequence, on the record chain; drop from
	 * the end until one does. */
	while (s->aidx.n) {
		const store_idx_t *e = &s->aidx.e[s->aidx.n - 1];
		const tb_frame_hdr_t *f;
		uint32_t sp;

		r = rec_decode(s, s->afd, key, e->off, sg->size, e->seq, e->seq,
			       STORE_SCAN_CHUNK, &f, &sp, why, sizeof(why));
		if (r < 0)
			return r;
		if (r == REC_OK) {
			r = idx_on_chain(s, sg, s->aidx.n - 1);
			if (r < 0)
				return r;
			if (r)
				break;
		}
		s->aidx.n--;
	}
	kept = s->aidx.n;
	if (kept) {
		off = s->aidx.e[kept - 1].off;
		seq = s->aidx.e[kept - 1].seq;
	} else {
		off = STORE_HDR_LEN;
		seq = key;
	}
	r = scan(s, s->afd, key, off, seq, sg->size, &s->aidx, &res);
	if (r < 0)
		return r;
	s->w_key = 0;

	quarantining = res.damaged && !ro && may_quarantine;
	if (res.end_off < sg->size) {
		if (res.tail == TAIL_ZERO)
			tb_info("store: %s/%s: %" PRIu64 " bytes of room after the "
				"last record (sequence %" PRIu64 ") %s", s->path,
				sname, sg->size - res.end_off, res.next_seq - 1,
				ro ? "ignored" : "cut");
		else
			tb_warn("store: %s/%s: cut %" PRIu64 " bytes of torn tail at "
				"offset %" PRIu64 " (%s); last good sequence %" PRIu64 "%s",
				s->path, sname, sg->size - res.end_off, res.end_off,
				res.why, res.next_seq - 1,
				ro ? " (read-only: not cut on disk)" : "");
		/* A quarantined file is set aside as it was found. */
		if (!ro && !quarantining && ftruncate(s->afd, (off_t)res.end_off) < 0)
			return tb_error_sys(errno, "store: truncate %s/%s", s->path,
					  sname);
		sg->size = res.end_off;
	}
	s->last_seq = res.next_seq - 1;

	if (res.damaged) {
		char qname[96] = "", lost[64] = "no sequence lost";

		if (quarantining) {
			r = quarantine(s, sg, res.end_off, qname, sizeof(qname));
			if (r < 0)
				return r;
		}
		if (res.dmg_last >= res.dmg_first)
			snprintf(lost, sizeof(lost), "sequences %" PRIu64 "..%" PRIu64
				 " lost", res.dmg_first, res.dmg_last);
		tb_warn("store: %s/%s: %zu damaged place%s (%" PRIu64 " bytes) "
			"before the end of the active segment, %s; not a torn "
			"tail: %s%s%s, every intact record after the damage kept",
			s->path, sname, res.damaged, res.damaged > 1 ? "s" : "",
			res.dmg_bytes, lost, qname[0] ? "quarantined as " : "",
			qname[0] ? qname : ro ? "left in place (read-only)" :
			"left in place", qname[0] ? " (the intact records replace it)" : "");
		if (qname[0]) {
			/* Start again on the file that replaced it, where the
			 * same holes are met again, recorded: counted once. */
			uint64_t holes = s->st.holes, lost = s->st.records_lost;

			hole_drop_key(s, key);
			close(s->afd);
			if (s->aifd >= 0)
				close(s->aifd);
			s->afd = s->aifd = -1;
			s->aidx.n = 0;
			r = seg_load(s, s->nsegs - 1, O_RDWR, &s->afd);
			if (r < 0)
				return r;
			r = recover_active(s, 0);
			s->st.holes = holes;
			s->st.records_lost = lost;
			return r;
		}
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
			r = file_create(s, iname, STORE_IDX_MAGIC, key, &s->aifd);
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
	s->idx_on_file = s->aidx.n;
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
	r = recover_active(s, 1);
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
		hole_drop_key(s, s->segs[0].first_seq);
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
	if (s->nsegs)
		active_unmap(s);
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
	free(s->holes);
	free(s);
	return r;
}

/* --------------------------------------------------------------- append */

static int frame_refuse(const tb_store_t *s, const tb_frame_hdr_t *f,
			uint64_t expect)
{
	if (!f)
		return tb_error_set(TB_EINVAL, "tb_store_append: NULL frame");
	if (s->cfg.read_only)
		return tb_error_set(TB_ESTATE, "tb_store_append: store %s is read-only",
				  s->path);
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
	/* Open takes records up to UINT64_MAX - 1 (scan), whose successor
	 * can still be numbered: the last number is never stored. */
	if (f->seq == UINT64_MAX)
		return tb_error_set(TB_EINVAL, "tb_store_append: sequence %" PRIu64
				  " refused: the store numbers up to %" PRIu64,
				  f->seq, UINT64_MAX - 1);
	return 0;
}

/*
 * The slow half of an append: the first segment, a roll, mapping the
 * active segment, making room.  Afterwards the record of `sp` bytes fits
 * at the end of the mapped active segment.
 */
static int append_room(tb_store_t *s, const tb_frame_hdr_t *f, uint32_t sp)
{
	seg_t *sg;
	int r = 0;

	if (s->nsegs == 0) {
		r = seg_create(s, f->seq);
	} else {
		sg = &s->segs[s->nsegs - 1];
		if (s->last_seq >= sg->first_seq &&
		    sg->size + sp > s->cfg.segment_bytes)
			r = seg_roll(s, f->seq);
	}
	if (r < 0)
		return r;
	sg = &s->segs[s->nsegs - 1];
	/* Mapped for a smaller first record that did not make it. */
	if (s->amap && sg->size + sp > s->amap_len)
		active_unmap(s);
	if (!s->amap) {
		r = active_map(s, sp);
		if (r < 0)
			return r;
	}
	return sg->size + sp > s->afile_len ? active_grow(s, sg->size + sp) : 0;
}

/*
 * One record: checks, a CRC and a copy into the mapping, an index entry
 * every 4 KiB.  No allocation, lock or system call but in append_room,
 * once per STORE_GROW bytes, and in a due sync under
 * TB_STORE_SYNC_INTERVAL.
 */
int tb_store_append(tb_store_t *s, const tb_frame_hdr_t *f)
{
	store_rec_t rh;
	uint8_t *p;
	uint64_t off;
	seg_t *sg;
	uint32_t sp;
	int r;

	if (tb_unlikely(!s))
		return tb_error_set(TB_EINVAL, "tb_store_append: NULL store");
	if (tb_unlikely(!f || f->seq != s->last_seq + 1 || s->nsegs == 0 ||
			f->seq == UINT64_MAX ||
			f->stream_id != s->cfg.stream_id ||
			f->length < TB_FRAME_HDR_LEN || f->length > TB_FRAME_MAX_LEN ||
			f->version != TB_FRAME_VERSION ||
			(f->type != TB_FRAME_DATA && f->type != TB_FRAME_HEARTBEAT) ||
			s->cfg.read_only)) {
		r = frame_refuse(s, f, s->nsegs ? s->last_seq + 1 : 0);
		if (r < 0)
			return r;
	}
	sp = rec_space(f->length);
	sg = s->amap ? &s->segs[s->nsegs - 1] : NULL;
	if (tb_unlikely(!sg || sg->size + sp > s->afile_len ||
			sg->size + sp > s->cfg.segment_bytes)) {
		r = append_room(s, f, sp);
		if (r < 0)
			return r;
		sg = &s->segs[s->nsegs - 1];
	}
	off = sg->size;
	p = s->amap + off;
	rh.len = f->length;
	rh.crc = tb_crc32c(0, f, f->length);
	/* The frame, its padding, then the length that makes it a record. */
	memcpy(p + sizeof(rh), f, f->length);
	memset(p + sizeof(rh) + f->length, 0, sp - sizeof(rh) - f->length);
	memcpy(p, &rh, sizeof(rh));
	if (s->aidx.n == 0 ||
	    off - s->aidx.e[s->aidx.n - 1].off >= TB_STORE_INDEX_INTERVAL) {
		r = idx_add(s, f->seq, off);
		if (tb_unlikely(r < 0))
			return r;
	}
	sg->size = off + sp;
	s->bytes += sp;
	s->last_seq = f->seq;
	s->st.appended++;
	s->st.bytes_appended += sp;
	s->dirty = 1;
	/* The byte bound holds at every append, not only at rolls. */
	if (tb_unlikely(s->cfg.retain_bytes && s->bytes > s->cfg.retain_bytes &&
			s->nsegs > 1))
		tb_store_retain(s);
	if (tb_unlikely(s->cfg.sync == TB_STORE_SYNC_INTERVAL) &&
	    tb_clock_mono_coarse_ns() - s->last_sync_ns >=
	    (uint64_t)s->cfg.sync_interval_ms * 1000000ull)
		return do_sync(s);
	return 0;
}

int tb_store_append_batch(tb_store_t *s, const tb_frame_hdr_t *const *frames,
			  int n)
{
	int done;

	if (!s || (!frames && n > 0) || n < 0)
		return tb_error_set(TB_EINVAL, "tb_store_append: bad argument");
	for (done = 0; done < n; done++) {
		int r = tb_store_append(s, frames[done]);

		if (r < 0)
			return done ? done : r;
	}
	return done;
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

static int lost_error(const tb_store_t *s, const hole_t *h)
{
	return tb_error_set(TB_STORE_LOST, "tb_store_read: sequences %" PRIu64
			  "..%" PRIu64 " are lost (%s/%020" PRIu64 ".seg offset %"
			  PRIu64 ": %s)", h->first, h->next - 1, s->path, h->key,
			  h->off, hole_why(h->kind));
}

/*
 * Where a read of `seq` in segment `sg` (records of it readable through
 * `fd`, index `idx`) starts walking: the nearest point at or before `seq`
 * known to hold the record it names (an index entry whose record carries
 * exactly its sequence, the end of a known hole, the segment's first
 * record), and in *hc the first known hole at or after it.  Returns 0,
 * TB_STORE_LOST when `seq` is in a known hole, or a negative code.
 */
static int walk_start(tb_store_t *s, const seg_t *sg, int fd,
		      const idx_vec_t *idx, uint64_t seq, uint64_t *offp,
		      uint64_t *atp, size_t *hc)
{
	const uint64_t key = sg->first_seq;
	const store_idx_t *e = idx_find(idx, seq);
	const hole_t *h = hole_of_seq(s, seq);
	uint64_t off = STORE_HDR_LEN, at = key;
	size_t c;
	char why[160];

	if (h && h->key == key)
		return lost_error(s, h);
	for (int tries = 0; e && tries < STORE_IDX_TRIES; tries++) {
		const tb_frame_hdr_t *f;
		uint32_t sp;
		int r = rec_decode(s, fd, key, e->off, sg->size, e->seq, e->seq,
				   STORE_READ_CHUNK, &f, &sp, why, sizeof(why));

		if (r < 0)
			return r;
		if (r == REC_OK) {
			off = e->off;
			at = e->seq;
			break;
		}
		e = e > idx->e ? e - 1 : NULL;
	}
	/* A hole of this segment that ends nearer. */
	c = hole_lower(s, key, off);
	while (c < s->nholes && s->holes[c].key == key &&
	       s->holes[c].next <= seq && s->holes[c].next_off >= off) {
		off = s->holes[c].next_off;
		at = s->holes[c].next;
		c++;
	}
	/* A start inside a hole's bytes (an index entry that checks, in
	 * damage): only the segment's first record is sure. */
	if (c > 0 && s->holes[c - 1].key == key && s->holes[c - 1].off < off &&
	    off < s->holes[c - 1].next_off) {
		off = STORE_HDR_LEN;
		at = key;
		c = hole_lower(s, key, off);
	}
	*offp = off;
	*atp = at;
	*hc = c;
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
		const uint64_t key = sg->first_seq;
		uint64_t end_seq = k + 1 < s->nsegs ? s->segs[k + 1].first_seq - 1 :
			s->last_seq;
		const idx_vec_t *idx = &s->aidx;
		uint64_t off = 0, at = seq;
		size_t hc = 0;
		int fd = s->afd;

		if (k + 1 < s->nsegs) {
			r = reader_open(s, k);
			if (r < 0)
				break;
			idx = &s->ridx;
			fd = s->rfd;
		}
		r = walk_start(s, sg, fd, idx, seq, &off, &at, &hc);
		if (r < 0)
			break;
		while (at <= end_seq && delivered < max_count) {
			const tb_frame_hdr_t *f;
			uint32_t sp;
			char why[160];
			hole_t h;

			if (hc < s->nholes && s->holes[hc].key == key &&
			    s->holes[hc].off == off) {
				const hole_t *hp = &s->holes[hc];

				/* Lost sequences this read wants: stop before
				 * them; a read from them gets TB_STORE_LOST. */
				if (hp->next > hp->first && hp->next > seq) {
					r = lost_error(s, hp);
					stop = 1;
					break;
				}
				off = hp->next_off;
				at = hp->next;
				hc++;
				continue;
			}
			r = rec_decode(s, fd, key, off, sg->size, at, end_seq,
				       STORE_READ_CHUNK, &f, &sp, why, sizeof(why));
			if (r < 0)
				break;
			if (r == REC_OK) {
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
				continue;
			}
			/* A hole not known yet: find where it ends, remember
			 * it, and meet it at the top of the loop. */
			if (r == REC_JUMP) {
				h = (hole_t){key, at, f->seq, off, off, HOLE_RECORDED};
			} else {
				int has_next = hc < s->nholes && s->holes[hc].key == key;
				uint64_t limit = has_next ? s->holes[hc].off : sg->size;
				uint64_t lim_seq = has_next ? s->holes[hc].first :
						   end_seq + 1;
				uint64_t y, q;

				r = resync(s, fd, key, off + STORE_REC_ALIGN, limit, at,
					   lim_seq - 1, &y, &q);
				if (r < 0)
					break;
				if (r == 0) {
					y = limit;
					q = lim_seq;
				}
				h = (hole_t){key, at, q, off, y,
					     off >= sg->size ? HOLE_MISSING : HOLE_DAMAGE};
				if (h.next > h.first)
					tb_warn("store: %s/%020" PRIu64 ".seg: sequences %"
						PRIu64 "..%" PRIu64 " lost at offset %" PRIu64
						" (%s); reads step over them", s->path, key,
						h.first, h.next - 1, off, why);
			}
			r = hole_add(s, &h, &hc);
			if (r < 0)
				break;
		}
		if (r < 0)
			break;
		seq = at;
	}
	return delivered ? delivered : r;
}

int tb_store_lost(const tb_store_t *s, uint64_t seq, uint64_t *first,
		  uint64_t *last)
{
	const hole_t *h = s ? hole_of_seq(s, seq) : NULL;

	if (!h)
		return 0;
	if (first)
		*first = h->first;
	if (last)
		*last = h->next - 1;
	return 1;
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
