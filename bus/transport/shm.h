/*
 * transport/shm.h - the shared-memory ring: one writer process, any number
 * of reader processes on the same host.
 *
 * The ring is a file under /dev/shm: a 4 KiB header page, then `ring_size`
 * bytes (a power of two) of frames laid end to end (frame.h).  The writer
 * owns two free-running 64-bit positions in the header:
 *
 *   tail_intent  where the writer is about to write up to (set before it
 *                writes a byte of a frame)
 *   tail         where committed frames end (set after the frame is whole)
 *
 * Both sit on one cache line that only the writer writes: a reader that
 * fetches `tail` to find a frame gets `tail_intent` in the same transfer, so
 * the overrun check after the copy costs no further cache miss.
 *
 * Readers keep their own position and never write to the file, so the writer
 * never waits for them and any number may come and go.  A reader copies a
 * frame out of the ring, then re-reads tail_intent: if the writer may have
 * started overwriting the bytes it copied (tail_intent - pos > ring_size) the
 * copy is discarded and the reader is *lapped*.  The sequence numbers tell it
 * exactly what it lost: it jumps to the live tail, and the first frame it
 * then reads names the end of the missing range.
 *
 * Memory ordering (writer W, reader R):
 *   W: store tail_intent; fence release (R0); write frame; store-release
 *      tail (R1).
 *   R: load-acquire tail (A1 pairs with R1): frames before it are whole.
 *      copy frame; fence acquire (A0 pairs with R0); load tail_intent: if
 *      the writer had begun overwriting, its intent store is visible.
 *
 * Liveness and epochs: the writer process beats `heartbeat_ns` every
 * heartbeat_ms from a background thread.  A reader checks it only when idle.
 * A new publisher never re-initialises a file in place: it builds a new file
 * and renames it over the path, then marks the old header REPLACED, so a
 * reader drains the old ring, re-opens the path and reports TB_NEW_EPOCH;
 * a new ring of the same epoch (a publisher restarted with
 * tb_publisher_open_epoch) is read from its start without a word, what
 * the reader already delivered coming again as duplicates.
 * A publisher that closes marks the header CLOSED with its final sequence.
 *
 * The header has a magic number and a format version; the version is stored
 * last when a file is created and checked first when it is opened.
 */
#ifndef TB_TRANSPORT_SHM_H
#define TB_TRANSPORT_SHM_H

#include "bus/barrier.h"
#include "bus/clock.h"
#include "bus/frame.h"
#include "bus/mem.h"
#include "bus/seq.h"
#include "bus/transport/transport.h"
#include <tickbus/tickbus.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#define TB_SHM_MAGIC 0x474e5253424b4954ull /* "TIKBSRNG" little-endian */
#define TB_SHM_VERSION 1u
#define TB_SHM_HDR_SIZE 4096u
/* Rings from 64 KiB (a few hundred quotes) to 1 GiB. */

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
	uint8_t pad0[12];
	char name[64];
	/* Writer positions, together on one line (see above). */
	_Atomic uint64_t tail_intent;
	_Atomic uint64_t tail;
	uint8_t pad1[112];
	/* Liveness, written by the writer's heartbeat thread and at close. */
	_Atomic uint64_t heartbeat_ns;
	_Atomic uint32_t state;
	uint32_t pad3;
	_Atomic uint64_t final_seq; /* last sequence published, once not OPEN */
	uint8_t pad4[TB_SHM_HDR_SIZE - 280];
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
_Static_assert(offsetof(tb_shm_hdr_t, name) == 64, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, tail_intent) == 128, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, tail) == 136, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, heartbeat_ns) == 256, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, state) == 264, "shm layout");
_Static_assert(offsetof(tb_shm_hdr_t, final_seq) == 272, "shm layout");
_Static_assert(sizeof(tb_shm_hdr_t) == TB_SHM_HDR_SIZE, "shm layout");

/* ------------------------------------------------------------------ writer */

typedef struct tb_shm_writer {
	tb_tx_t tx;             /* first: the ring, over the shared file */
	tb_shm_hdr_t *hdr;
	tb_mem_t mem;           /* the mapping, its page size and node */
	char path[TB_PATH_MAX]; /* where the ring file lives */
} tb_shm_writer_t;

/* Creates a new ring file for `cfg` and renames it over its shm path.
 * Fails with TB_EBUSY if a live publisher owns the path. */
int tb_shm_writer_open(tb_shm_writer_t *w, const tb_stream_cfg_t *cfg,
		       uint64_t epoch);
/* Marks the ring CLOSED with `final_seq` and unmaps it.  The file stays so
 * that late readers see the close; `unlink` removes it too. */
void tb_shm_writer_close(tb_shm_writer_t *w, uint64_t final_seq, int unlink);
/* Stores a heartbeat; called from the publisher's heartbeat thread. */
void tb_shm_writer_beat(tb_shm_writer_t *w, uint64_t now_ns);

/* ------------------------------------------------------------------ reader */

typedef enum tb_shm_reader_state {
	TB_SHM_R_WAITING = 0, /* no ring at the path yet (or after an epoch) */
	TB_SHM_R_ATTACHED = 1,
	TB_SHM_R_ENDED = 2,   /* closed or dead; waiting for a new epoch */
} tb_shm_reader_state_t;

typedef struct tb_shm_reader {
	tb_rx_t rx;            /* first: the transport interface */
	const tb_shm_hdr_t *hdr;
	const uint8_t *ring;
	uint64_t mask;
	uint64_t pos;
	uint64_t epoch;
	uint32_t max_frame;
	uint32_t stream_id;
	tb_shm_reader_state_t state;
	int lapped;            /* jumped to live; the next frame ends the loss */
	uint64_t lap_from;     /* first sequence lost */
	uint64_t idle_polls;    /* empty polls since the last frame */
	uint64_t last_check_ns; /* last look at liveness or the path */
	uint64_t opened_ns;     /* rings made before this and no longer live
				   are leftovers, not publishers to follow */
	uint64_t liveness_ns;  /* beat older than this: the writer is dead */
	uint8_t *scratch;      /* max_frame bytes: frames are copied here */
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
 * negative code for a file that is there but unusable (bad magic, version,
 * size).  Slow path. */
int tb_shm_reader_attach(tb_shm_reader_t *r, int from_start);

/* Out-of-line parts of the reader: idle checks, laps, attaching. */
int tb_shm_reader_idle(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		       uint64_t now_ns);
void tb_shm_reader_lap(tb_shm_reader_t *r, tb_seq_t *seq);

/*
 * Delivers up to `limit` frames to `handler`, in sequence order.  Returns the
 * count, or when it delivered nothing a condition: TB_NOT_CONNECTED,
 * TB_LAPPED / TB_GAP (range in *loss), TB_CLOSED, TB_PUBLISHER_DEAD,
 * TB_NEW_EPOCH.  A loss is reported before the first frame after it.
 * Hot path: no allocation, lock or system call while frames flow; the idle
 * branch looks at the writer's liveness at most once a millisecond.
 */
static inline int tb_shm_reader_poll(tb_shm_reader_t *r, tb_seq_t *seq,
				     tb_seq_range_t *loss, tb_handler_t handler,
				     void *clientd, int limit)
{
	const tb_shm_hdr_t *hdr = r->hdr;
	uint64_t ring_size = r->mask + 1;
	uint64_t tail, now_ns;
	tb_msg_t msg;
	int n = 0;

	if (tb_unlikely(r->state != TB_SHM_R_ATTACHED))
		return tb_shm_reader_idle(r, seq, loss, 0);
	tail = tb_atomic_load_acquire(&hdr->tail); /* A1 pairs with R1 */
	if (tail == r->pos) {
		if (tb_likely((++r->idle_polls & 255) != 0))
			return 0;
		return tb_shm_reader_idle(r, seq, loss, 0);
	}
	r->idle_polls = 0;
	now_ns = tb_clock_now_ns_inline();
	while (r->pos != tail && n < limit) {
		uint64_t off = r->pos & r->mask;
		const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)(r->ring + off);
		const tb_frame_hdr_t *c = (const tb_frame_hdr_t *)r->scratch;
		uint64_t avail = ring_size - off;
		uint32_t len;

		if (tb_unlikely(tail - r->pos > ring_size))
			goto lapped;
		len = f->length;
		if (avail > r->max_frame)
			avail = r->max_frame;
		if (tb_unlikely(len < TB_FRAME_HDR_LEN || len > avail))
			len = TB_FRAME_HDR_LEN; /* judged below, after the check */
		memcpy(r->scratch, f, len);
		tb_atomic_fence_acquire(); /* A0 pairs with R0 */
		if (tb_unlikely(tb_atomic_load_relaxed(&hdr->tail_intent) - r->pos > ring_size))
			goto lapped;
		if (tb_unlikely(tb_frame_check(c, len) < 0))
			goto lapped; /* a corrupt ring: resynchronise at the tail */
		if (c->type == TB_FRAME_PAD) {
			/* The writer pads only up to the ring's end (ring.h);
			 * any other pad is a corrupt ring. */
			if (tb_unlikely(c->length != ring_size - off))
				goto lapped;
			r->pos += c->length;
			continue;
		}
		switch (tb_seq_admit(seq, c->seq)) {
		case TB_SEQ_NEXT:
			break;
		case TB_SEQ_DUPLICATE:
			r->pos += tb_frame_space(c->length);
			continue;
		case TB_SEQ_GAP:
			if (n > 0)
				return n; /* report the loss on its own */
			tb_seq_gap_to(seq, c->seq, loss);
			n = r->lapped ? TB_LAPPED : TB_GAP;
			r->lapped = 0;
			return n;
		}
		r->lapped = 0;
		r->pos += tb_frame_space(c->length);
		tb_frame_to_msg(c, &msg);
		msg.receive_ns = now_ns;
		handler(clientd, &msg);
		n++;
	}
	return n;
lapped:
	tb_shm_reader_lap(r, seq);
	return n;
}

#endif
