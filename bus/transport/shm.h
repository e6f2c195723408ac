/*
 * transport/shm.h - the shared-memory ring: one writer process, any number
 * of reader processes on the same host.
 *
 * The ring is a file under /dev/shm: a 4 KiB header page, then `ring_size`
 * bytes (a power of two) of frames laid end to end (frame.h), written by
 * the publisher through the ring of ring.h.  Readers keep their own
 * position and never write to the file, so the writer never waits for them
 * and any number may come and go.
 *
 * Format 2: one cache-line handoff per message.  There is no shared tail.
 * A reader at position `pos` expecting sequence `next` polls the sequence
 * word of the frame at pos itself (A1), which the writer stores last with
 * release (R1 in tb_ring_commit) and zeroes one frame ahead, so the word
 * is 0 until the frame is whole and then exactly `next`.  The line it polls
 * is the frame's first, and while it waits it keeps the second coming too
 * (a prefetch per empty poll), so a message whose frame fits one or two
 * lines costs one dependent transfer and nothing else.  The reader copies the
 * frame out (the writer may overwrite the slot as soon as it comes round),
 * fences (A0), and reads the writer's `intent` (ring.h): if intent - pos
 * exceeds the ring the copy may be torn and is thrown away.  That line is
 * written once a chunk (1/32 of the ring, at most 32 KiB), so on the fast
 * path it is read from the reader's own cache: lap detection touches no
 * line the writer writes per message.  A reader more than ring_size - chunk
 * behind counts as lapped.
 *
 * What a reader finds at pos, and what it does:
 *   0               nothing new.  An empty poll also reads intent, so a
 *                   reader lapped in a burst is told at once even if the
 *                   stream then goes quiet.
 *   next            a frame: copy, check intent, deliver (or skip a pad).
 *   anything else   lapped (intent says so) or a frame the single writer
 *                   could not have written: corruption (below).
 * Lapped: the reader resynchronises at the live end, found by walking the
 * committed frames from the writer's newest mark (ring.h), and reports the
 * exact range it lost, [first undelivered, sequence at the live end - 1],
 * on that same poll (TB_LAPPED).  Lapped again before it reads a frame
 * past that point, it is told again.
 * Corruption (a wrong sequence or a broken header where the reader was not
 * lapped) is never taken for a gap or for duplicates: the frame is not
 * delivered, TB_CTR_MALFORMED counts it, and the reader resynchronises -
 * past the broken frame when its header is otherwise sound (the next frame
 * must then confirm it), else at a newer mark - and reports exactly what
 * it did not deliver (TB_GAP).  With nowhere sound to go on from, it waits for
 * the writer's next mark, and reports what the writer says it published
 * meanwhile (`beat_seq`, stored with every heartbeat) within a beat.
 *
 * Liveness and epochs: the writer process beats `heartbeat_ns` every
 * heartbeat_ms from a background thread.  A reader checks it only when idle.
 * A new publisher never re-initialises a file in place: it builds a new file
 * and renames it over the path, then marks the old header REPLACED, so a
 * reader drains the old ring, re-opens the path and reports TB_NEW_EPOCH;
 * a new ring of the same epoch (a publisher restarted with
 * tb_publisher_open_epoch) is read from its start without a word, what
 * the reader already delivered coming again as duplicates.
 * A publisher that closes marks the header CLOSED with its final sequence,
 * and leaves a last mark at its tail.
 *
 * Files.  A ring is created under a fresh name with O_EXCL | O_NOFOLLOW,
 * given exactly the stream's shm_mode (0600, or 0640 with shm_group) and
 * group, and renamed over the path.  What is at the path before is
 * replaced only if it is a tickbus ring: anything else (a plain file, a
 * FIFO, a link) is refused, and a live ring of the publisher's own user is
 * not taken over (TB_EBUSY).  Readers open with O_NOFOLLOW | O_NONBLOCK,
 * so nothing at the path can hang them, and trust a ring only if it is a
 * regular file owned by themselves or root (or in shm_group, when set),
 * no more open than shm_mode and writable by its owner alone.
 *
 * The header has a magic number and a format version; the version is stored
 * last when a file is created and checked first when it is opened.  Format 1
 * readers refuse format 2 rings by that version and vice versa; the liveness
 * fields keep format 1's offsets, so a format 2 publisher does not take a
 * path over from a live format 1 publisher.
 */
#ifndef TB_TRANSPORT_SHM_H
#define TB_TRANSPORT_SHM_H

#include "bus/barrier.h"
#include "bus/clock.h"
#include "bus/frame.h"
#include "bus/mem.h"
#include "bus/ring.h"
#include "bus/seq.h"
#include "bus/transport/transport.h"
#include <tickbus/tickbus.h>

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#define TB_SHM_MAGIC 0x474e5253424b4954ull /* "TIKBSRNG" little-endian */
#define TB_SHM_VERSION 2u
#define TB_SHM_HDR_SIZE 4096u
/* Ring modes when the stream sets no shm_mode. */
#define TB_SHM_MODE_DEFAULT 0600u
#define TB_SHM_MODE_GROUP_DEFAULT 0640u

enum tb_shm_state {
	TB_SHM_OPEN = 1,
	TB_SHM_CLOSED = 2,   /* the publisher closed the stream */
	TB_SHM_REPLACED = 3, /* a new publisher owns the path (new epoch) */
};

typedef struct tb_shm_hdr {
	/* Identity: written once, before `version`. */
	uint64_t magic;
	_Atomic uint32_t version;
	uint32_t hdr_size;
	uint64_t ring_size;
	uint64_t epoch;
	uint32_t stream_id;
	int32_t pid;
	uint64_t start_ns;
	uint32_t max_frame; /* largest frame (header + payload) allowed */
	uint32_t chunk;     /* how far ahead intent runs: the lap margin */
	uint8_t pad0[8];
	char name[64];
	/* The writer's announcements: intent and marks, written once a
	 * chunk (ring.h). */
	tb_ring_lap_t lap;
	uint8_t pad1[64];
	/* Liveness, written by the writer's heartbeat thread and at close.
	 * Same offsets as format 1. */
	_Atomic uint64_t heartbeat_ns;
	_Atomic uint32_t state;
	uint32_t pad3;
	_Atomic uint64_t final_seq; /* last sequence published, once not OPEN */
	_Atomic uint64_t beat_seq;  /* last sequence published, as of the
				       latest beat */
	uint8_t pad4[TB_SHM_HDR_SIZE - 288];
} tb_shm_hdr_t;

_Static_assert(offsetof(tb_shm_hdr_t, magic) == 0, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, version) == 8, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, hdr_size) == 12, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, ring_size) == 16, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, epoch) == 24, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, stream_id) == 32, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, pid) == 36, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, start_ns) == 40, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, max_frame) == 48, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, chunk) == 52, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, name) == 64, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, lap) == 128, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, heartbeat_ns) == 256, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, state) == 264, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, final_seq) == 272, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, beat_seq) == 280, "shm layout");
_Static_assert(sizeof(tb_shm_hdr_t) == TB_SHM_HDR_SIZE, "shm layout");

/* Who may open a ring and whom its readers trust, from the stream's
 * shm_mode and shm_group. */
typedef struct tb_shm_access {
	mode_t mode;  /* the ring's mode, exactly */
	gid_t group;  /* its group; (gid_t)-1: the creator's own */
} tb_shm_access_t;

/* Resolves cfg's shm_mode and shm_group.  0, or TB_ECONFIG for a group
 * that does not exist, with a message. */
int tb_shm_access_of(const tb_stream_cfg_t *cfg, tb_shm_access_t *acc);

/* ------------------------------------------------------------------ writer */

typedef struct tb_shm_writer {
	tb_tx_t tx;             /* first: the ring, over the shared file */
	tb_shm_hdr_t *hdr;
	tb_mem_t mem;           /* the mapping, its page size and node */
	char path[TB_PATH_MAX]; /* where the ring file lives */
} tb_shm_writer_t;

/* Creates a new ring file for `cfg` and renames it over its shm path.
 * Fails with TB_EBUSY if a live publisher of this user owns the path, or
 * with TB_EFORMAT if something other than a tickbus ring is there. */
int tb_shm_writer_open(tb_shm_writer_t *w, const tb_stream_cfg_t *cfg,
		       uint64_t epoch);
/* Marks the ring CLOSED with `final_seq` and unmaps it.  The file stays so
 * that late readers see the close; `unlink` removes it too. */
void tb_shm_writer_close(tb_shm_writer_t *w, uint64_t final_seq, int unlink);
/* Stores a heartbeat and the last sequence published; called from the
 * publisher's heartbeat thread. */
void tb_shm_writer_beat(tb_shm_writer_t *w, uint64_t now_ns, uint64_t last_seq);

/* ------------------------------------------------------------------ reader */

typedef enum tb_shm_reader_state {
	TB_SHM_R_WAITING = 0, /* no ring at the path yet (or after an epoch) */
	TB_SHM_R_ATTACHED = 1,
	TB_SHM_R_ENDED = 2,   /* closed or dead; waiting for a new epoch */
} tb_shm_reader_state_t;

typedef struct tb_shm_reader {
	tb_rx_t rx;            /* first: the transport interface */
	/* Hot: read on every poll. */
	const uint8_t *ring;
	const tb_ring_lap_t *lap;
	uint64_t mask;
	uint64_t pos;          /* where the next frame starts */
	uint64_t next;         /* the sequence that frame must carry */
	uint8_t *scratch;      /* max_space bytes: frames are copied here */
	uint32_t max_space;    /* tb_frame_space(max_frame) */
	uint32_t max_body;     /* max_space - TB_FRAME_HDR_LEN */
	uint32_t idle_polls;   /* empty polls since the last frame */
	int slow;              /* not attached, or resynchronising: every
				  poll takes tb_shm_reader_slow */
	/* Cold. */
	int desync;            /* lost the frame boundaries (corruption):
				  waiting for a mark past pos */
	tb_shm_reader_state_t state;
	const tb_shm_hdr_t *hdr;
	uint64_t epoch;
	uint32_t stream_id;
	uint32_t max_frame;
	uint64_t skipped;      /* where the last step past a corrupt frame
				  led: not taken twice running */
	uint64_t suspect;      /* `next` when the writer's beat last said
				  it was published but pos held nothing */
	uint64_t last_check_ns; /* last look at liveness or the path */
	uint64_t opened_ns;     /* rings made before this and no longer live
				   are leftovers, not publishers to follow */
	uint64_t liveness_ns;  /* beat older than this: the writer is dead */
	tb_shm_access_t access;
	size_t map_len;
	dev_t dev;
	ino_t ino;
	char path[TB_PATH_MAX];
} tb_shm_reader_t;

/* Prepares a reader of cfg->shm_path.  It attaches now if a live ring is
 * there (at the live position: a late join) or later, from the start of the
 * epoch, when one appears. */
int tb_shm_reader_open(tb_shm_reader_t *r, const tb_stream_cfg_t *cfg);
void tb_shm_reader_close(tb_shm_reader_t *r);

/* Tries to attach to the ring at the path; `from_start` starts at sequence 1
 * of the epoch rather than at the live position.  Returns 1 when attached to
 * a ring of a different epoch than before, 0 when nothing changed, or a
 * negative code for a file that is there but unusable (not a regular file,
 * an owner or mode not trusted, bad magic, version, size).  Slow path. */
int tb_shm_reader_attach(tb_shm_reader_t *r, int from_start);

/* Out-of-line parts of the reader, for tb_shm_reader_poll. */
int tb_shm_reader_slow(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		       tb_handler_t handler, void *clientd, int limit);
int tb_shm_reader_odd(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		      tb_handler_t handler, void *clientd, int limit);
int tb_shm_reader_idle(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss);

/* tb_shm_reader_read's "the frame at pos is not `next` and nothing was
 * delivered": lapped or corrupt, for tb_shm_reader_odd to tell apart. */
#define TB_SHM_ODD_ INT_MIN

/* Copies the `len` bytes after a frame's header, a multiple of
 * TB_FRAME_ALIGN.  Hot path: up to 96 bytes (a frame of two cache lines)
 * in moves the compiler inlines, more through memcpy. */
static inline void tb_shm_copy_body(uint8_t *dst, const uint8_t *src,
				    uint32_t len)
{
	if (tb_unlikely(len > 96)) {
		memcpy(dst, src, len);
		return;
	}
	if (len & 32) {
		memcpy(dst, src, 32);
		dst += 32;
		src += 32;
	}
	if (len & 64)
		memcpy(dst, src, 64);
}

/*
 * Delivers up to `limit` frames from pos to `handler`, in sequence order.
 * Returns the count; TB_GAP when the tracker is behind the ring's first
 * frame (a late join at a given sequence; range in *loss); TB_SHM_ODD_
 * when the frame at pos is neither nothing nor `next` and nothing was
 * delivered.  Hot path: one acquire load of the frame's own sequence word,
 * a copy, one load of intent from the reader's cache; one clock read per
 * call; no allocation, lock, system call, read-modify-write or fence that
 * costs an instruction on x86.
 */
static inline __attribute__((always_inline)) int
tb_shm_reader_read(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		   tb_handler_t handler, void *clientd, int limit)
{
	const uint64_t size = r->mask + 1;
	uint64_t now_ns = 0;
	tb_msg_t msg;
	int n = 0;

	while (n < limit) {
		uint64_t off = r->pos & r->mask;
		const uint8_t *f = r->ring + off;
		uint8_t *c = r->scratch;
		const tb_frame_hdr_t *h = (const tb_frame_hdr_t *)c;
		/* A1 pairs with R1 in tb_ring_commit: the word holds `next`
		 * once the frame is whole. */
		uint64_t s = tb_atomic_plain_load_acquire(
			&((const tb_frame_hdr_t *)f)->seq);
		uint32_t space;

		if (tb_unlikely(s != r->next)) {
			if (tb_likely(s == 0)) {
				/* Nothing new; lapped in a burst that went
				 * quiet?  Relaxed: after A1, as A0 below. */
				if (n == 0 && tb_unlikely(tb_atomic_load_relaxed(
						  &r->lap->intent) - r->pos > size))
					return TB_SHM_ODD_;
				/* Keep the frame's second line coming while
				 * waiting: when the first says the frame is
				 * whole, the rest of a small message is here
				 * already, not one more transfer away. */
				__builtin_prefetch(r->ring + (((off | (TB_CACHE_LINE - 1)) +
							       1) & r->mask));
				break;
			}
			return n ? n : TB_SHM_ODD_;
		}
		memcpy(c, f, TB_FRAME_HDR_LEN);
		space = tb_frame_space(h->length);
		/* A length below a header or above the largest frame (one
		 * compare), or past the end of the ring. */
		if (tb_unlikely(h->length - TB_FRAME_HDR_LEN > r->max_body ||
				space > size - off))
			return n ? n : TB_SHM_ODD_;
		tb_shm_copy_body(c + TB_FRAME_HDR_LEN, f + TB_FRAME_HDR_LEN,
				 space - TB_FRAME_HDR_LEN);
		/* A0 pairs with R0 in tb_ring_announce: had the writer begun
		 * to overwrite what was copied, its intent is seen now.  (The
		 * copy's sequence is then `s` too: the writer stores a
		 * frame's word once a lap.) */
		tb_atomic_fence_acquire();
		if (tb_unlikely(tb_atomic_load_relaxed(&r->lap->intent) - r->pos >
				size))
			return n ? n : TB_SHM_ODD_;
		if (tb_unlikely(tb_frame_kind(h) != TB_FRAME_KIND(TB_FRAME_DATA))) {
			if (tb_frame_kind(h) == TB_FRAME_KIND(TB_FRAME_PAD) &&
			    off + space == size) {
				r->pos += space;
				continue;
			}
			return n ? n : TB_SHM_ODD_;
		}
		switch (tb_seq_admit(seq, s)) {
		case TB_SEQ_NEXT:
			break;
		case TB_SEQ_DUPLICATE:
			r->pos += space;
			r->next = s + 1;
			continue;
		case TB_SEQ_GAP:
			if (n > 0)
				return n; /* the gap on its own poll */
			tb_seq_gap_to(seq, s, loss);
			return TB_GAP;
		}
		r->pos += space;
		r->next = s + 1;
		__builtin_prefetch(r->ring + (r->pos & r->mask));
		/* One clock read per poll, and another only when the poll
		 * has overtaken it (a frame published after the read, in a
		 * long batch): a receive time never precedes its publish
		 * time.  The first frame reads it (now_ns is 0). */
		if (h->publish_ns > now_ns)
			now_ns = tb_clock_now_ns_inline();
		tb_frame_to_msg(h, &msg);
		msg.receive_ns = now_ns;
		handler(clientd, &msg);
		n++;
	}
	return n;
}

/*
 * Delivers up to `limit` frames to `handler`, in sequence order.  Returns the
 * count, or when it delivered nothing a condition: TB_NOT_CONNECTED,
 * TB_LAPPED / TB_GAP (range in *loss), TB_CLOSED, TB_PUBLISHER_DEAD,
 * TB_NEW_EPOCH.  A loss is reported on a poll of its own, before the first
 * frame after it, as soon as the reader knows it: never 0 while a loss is
 * known and unreported.  Hot path: see tb_shm_reader_read; the idle branch
 * looks at the writer's liveness at most once a millisecond.
 */
static inline int tb_shm_reader_poll(tb_shm_reader_t *r, tb_seq_t *seq,
				     tb_seq_range_t *loss, tb_handler_t handler,
				     void *clientd, int limit)
{
	int n;

	if (tb_unlikely(r->slow))
		return tb_shm_reader_slow(r, seq, loss, handler, clientd, limit);
	n = tb_shm_reader_read(r, seq, loss, handler, clientd, limit);
	if (tb_likely(n > 0)) {
		r->idle_polls = 0;
		return n;
	}
	if (tb_likely(n == 0)) {
		if (tb_likely((++r->idle_polls & 255) != 0))
			return 0;
		return tb_shm_reader_idle(r, seq, loss);
	}
	if (n == TB_SHM_ODD_)
		return tb_shm_reader_odd(r, seq, loss, handler, clientd, limit);
	return n;
}

#endif
