/*
 * store.h - the retransmit store: every frame of one stream and epoch, kept
 * on disk in append-only segment files, readable again by sequence number.
 *
 * The recovery service appends each frame it receives in sequence order and
 * later replays ranges to subscribers that lost them.  The on-disk layout,
 * its invariants and crash handling are described at the top of store.c.
 *
 * Threads: a tb_store_t is not thread-safe; one thread at a time may call
 * any of its functions (the recovery service's store thread).  Two processes
 * cannot open the same stream and epoch for writing: the second gets
 * TB_EBUSY.  Read-only opens share.
 *
 * Results: 0 or a count on success; a negative TB_* code with a message in
 * tb_errmsg() on failure, plus the two read conditions below.
 */
#ifndef TB_STORE_H
#define TB_STORE_H

#include "bus/frame.h"
#include <tickbus/tickbus.h>

#include <stddef.h>
#include <stdint.h>

/*
 * Read conditions.  They are expected answers rather than failures, and the
 * recovery protocol forwards them as "too old" / "not yet published" rejects.
 * They sit below the TB_E* range of tickbus_err.h so that they can move into
 * it unchanged.
 */
enum tb_store_result {
	TB_STORE_TOO_OLD = -40, /* before tb_store_first_seq(): retention
				   deleted it (or it was never stored) */
	TB_STORE_NOT_YET = -41, /* after tb_store_last_seq(): not stored yet */
	TB_STORE_LOST = -42,    /* in a range the store held but lost to
				   damage; tb_store_lost() gives the range */
};

typedef enum tb_store_sync {
	TB_STORE_SYNC_NONE = 0,     /* never fsync: survives a process crash
				       (data is in the page cache once append
				       returns), not a machine crash */
	TB_STORE_SYNC_INTERVAL = 1, /* fdatasync when sync_interval_ms has
				       passed, checked at append and flush */
	TB_STORE_SYNC_BATCH = 2,    /* fdatasync at every tb_store_flush() */
} tb_store_sync_t;

#define TB_STORE_SEGMENT_DEFAULT (64ull << 20)
/* Small enough for tests to roll segments every few records; a segment
 * must hold its header and at least one small record. */
#define TB_STORE_SEGMENT_MIN 1024ull
/* Index entries hold 32-bit offsets; one record may overshoot the bound by
 * up to TB_FRAME_MAX_LEN, so 2 GiB keeps every offset below 4 GiB. */
#define TB_STORE_SEGMENT_MAX (2ull << 30)
#define TB_STORE_SYNC_INTERVAL_DEFAULT_MS 100
/* One index entry per 4 KiB of records: a read steps over at most this
 * many bytes (plus one record) before the first frame it wants. */
#define TB_STORE_INDEX_INTERVAL 4096u

typedef struct tb_store_cfg {
	char dir[TB_PATH_MAX];  /* root directory, created if missing
				   (its parent must exist) */
	uint32_t stream_id;     /* > 0; every appended frame must carry it */
	uint64_t epoch;         /* publisher epoch: one sub-directory each */
	uint64_t segment_bytes; /* roll after this many bytes; default 64 MiB */
	uint64_t retain_bytes;  /* bound on segment + index bytes; 0 = none */
	uint64_t retain_age_s;  /* delete segments whose newest record is
				   older; 0 = none */
	tb_store_sync_t sync;
	uint32_t sync_interval_ms; /* TB_STORE_SYNC_INTERVAL; default 100 */
	int read_only;          /* no appends, no repair on disk, no retention */
	/* Wall clock for age retention and file headers, in ns on the
	 * CLOCK_REALTIME base (segment mtimes are compared with it).  NULL:
	 * tb_clock_realtime_ns.  Tests set it to move time forward. */
	uint64_t (*clock)(void *clockd);
	void *clockd;
} tb_store_cfg_t;

typedef struct tb_store_stats {
	uint64_t appended;         /* records appended since open */
	uint64_t bytes_appended;   /* their record bytes (framing included) */
	uint64_t records_examined; /* records decoded by reads: delivered ones
				      plus those stepped over from an index
				      point to the first wanted */
	uint64_t preads;           /* pread calls made by reads (data, index) */
	uint64_t syncs;            /* fdatasync calls */
	uint64_t segments;         /* segment files now */
	uint64_t segments_deleted; /* by retention, since open */
	uint64_t bytes;            /* segment + index bytes now */
	uint64_t holes;            /* lost ranges found (by reads, or by open
				      in the active segment) since open */
	uint64_t records_lost;     /* the sequences in them */
	uint64_t segments_quarantined; /* damaged active segments set aside
					  by open (quarantine/) */
} tb_store_stats_t;

typedef struct tb_store tb_store_t;

/* Called once per frame by tb_store_read.  `frame` (header then payload,
 * frame->length bytes, 8-byte aligned) is valid only during the call, which
 * must not call back into the store.  Return 0 to go on, non-zero to stop
 * after this frame (it counts as delivered). */
typedef int (*tb_store_read_fn)(void *clientd, const tb_frame_hdr_t *frame);

/* Fills `cfg` with the defaults; dir, stream_id and epoch stay zero. */
void tb_store_cfg_init(tb_store_cfg_t *cfg);

/*
 * Opens (creating if needed) the store of cfg->stream_id and cfg->epoch
 * under cfg->dir.  The newest segment is checked from its last index point:
 * a torn tail (records that do not check, nothing that checks after them)
 * is cut, with a warning; damage with intact records after it is not a
 * tail: the segment is quarantined (set aside in <store>/quarantine/, its
 * intact records kept in its place, the range between reported lost by
 * reads), with a warning and stats.segments_quarantined.  A segment file
 * with a bad header fails the open with TB_EFORMAT.  Returns 0, TB_EINVAL,
 * TB_EBUSY, TB_EFORMAT, TB_ENOENT (read-only and absent) or a system error.
 */
int tb_store_open(tb_store_t **s, const tb_store_cfg_t *cfg);

/* Syncs (unless TB_STORE_SYNC_NONE), closes and frees.  NULL is a no-op. */
int tb_store_close(tb_store_t *s);

/*
 * Appends one frame (a tb_frame_hdr_t followed by its payload,
 * frame->length bytes in all).  Its seq must be tb_store_last_seq() + 1,
 * or any seq >= 1 in an empty store; anything else is TB_EINVAL (duplicate
 * or out of order) and stores nothing.  A copy into the mapped active
 * segment, no system call (but once per MiB, to make room, and a due sync
 * under TB_STORE_SYNC_INTERVAL); once it returns, the record survives the
 * process (SIGKILL included).  Rolls to a new segment when the current one
 * is full.  Returns 0 or a TB_E* code (a full disk: the error, never a
 * signal).
 */
int tb_store_append(tb_store_t *s, const tb_frame_hdr_t *frame);

/* Appends frames[0..n) in order, as tb_store_append each.  Returns how
 * many were appended; on an error at the first frame, the error. */
int tb_store_append_batch(tb_store_t *s, const tb_frame_hdr_t *const *frames,
			  int n);

/* Durability point: fdatasync under TB_STORE_SYNC_BATCH, a due sync under
 * TB_STORE_SYNC_INTERVAL, then age and size retention.  Call it from the
 * owner's idle loop.  Returns 0 or a TB_E* code. */
int tb_store_flush(tb_store_t *s);

/* Applies retention now: deletes whole oldest segments (never the one being
 * appended to) while over the byte bound or older than the age bound.
 * Returns the number of segments deleted, or a TB_E* code. */
int tb_store_retain(tb_store_t *s);

/*
 * Delivers up to `max_count` frames, starting at `first_seq`, to `fn`, in
 * sequence order.  Costs one index lookup and one positioned read (none in
 * the active segment once this writer has appended to it: it is mapped),
 * never a scan of a segment from its start.  Returns the number delivered (> 0), or:
 *   TB_STORE_TOO_OLD  first_seq < tb_store_first_seq() (message says which
 *                     is the earliest available)
 *   TB_STORE_NOT_YET  first_seq > tb_store_last_seq() (message: the latest)
 *   TB_STORE_LOST     first_seq is in a range lost to damage (a corrupt
 *                     record); tb_store_lost() gives the range, and a read
 *                     from the sequence after it goes on
 *   TB_EINVAL         first_seq 0, max_count < 1, fn NULL
 * A read stops before a lost range (and before any error) with the count
 * delivered so far; the next read, from the following sequence, reports
 * it.  Every frame delivered has passed its CRC and carries the sequence
 * expected.
 */
int tb_store_read(tb_store_t *s, uint64_t first_seq, int max_count,
		  tb_store_read_fn fn, void *clientd);

/*
 * When `seq` is in a range lost to damage that the store knows of (a read
 * that returned TB_STORE_LOST, or open, found it), sets [*first, *last] to
 * the whole range and returns 1; else 0.  Replaying across a hole:
 *
 *   r = tb_store_read(s, q, max, fn, cd);
 *   if (r == TB_STORE_LOST && tb_store_lost(s, q, &a, &b))
 *           report or refetch [a, b]; go on at b + 1
 */
int tb_store_lost(const tb_store_t *s, uint64_t seq, uint64_t *first,
		  uint64_t *last);

/* Oldest and newest stored sequence; both 0 when the store is empty. */
uint64_t tb_store_first_seq(const tb_store_t *s);
uint64_t tb_store_last_seq(const tb_store_t *s);

void tb_store_stats(const tb_store_t *s, tb_store_stats_t *st);

/*
 * Lists the epochs stored for `stream_id` under `dir`, ascending, into
 * epochs[0..max).  Returns how many there are (which may exceed max), 0 when
 * the directory does not exist, or a TB_E* code.
 */
int tb_store_epochs(const char *dir, uint32_t stream_id, uint64_t *epochs,
		    size_t max);

#endif
