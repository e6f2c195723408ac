/*
 * transport/rc_pub.h - the rc publisher's hot path, for the publisher's
 * offer (the design is in transport/rc.h, the rest of the publisher in
 * rc_pub.c).
 *
 * An offer on an rc stream is the publisher's claim, copy and commit
 * followed by one WRITE_WITH_IMM per subscriber.  Through the transport's
 * send op that costs a call: its own register saves, its arguments, and
 * the frame's length and sequence read back from the ring.  So what the
 * send touches for every frame is declared here -- the subscriber table
 * and the mark of its one reader (tb_rc_pub_t), each subscriber's work
 * request prepared at join and the limits its common case compares with
 * (tb_rc_pub_sub_t) -- and the send of one small data frame,
 * tb_rc_pub_send_small, is inlined in the publisher's rc offer, so that
 * the two share one prologue and one set of saved registers, and the
 * frame's fields stay in hand.  Everything that is not the common
 * case stays out of line in rc_pub.c: a subscriber's slow path
 * (tb_rc_pub_write_slow), a failed post (tb_rc_pub_post_failed), and
 * every stream whose send is not the plain one (batching, back-pressure,
 * no membarrier: tb_rc_pub_of returns NULL for those, and the publisher
 * calls the op).  rc_pub.c's own send uses the same inlines, so there is
 * one copy of the hot path.
 *
 * Threads: the publishing thread only (transport.h's "hot" ops).
 */
#ifndef TB_TRANSPORT_RC_PUB_H
#define TB_TRANSPORT_RC_PUB_H

#include "bus/barrier.h"
#include "bus/counters.h"
#include "bus/frame.h"
#include "bus/transport/control.h"
#include "bus/transport/rc.h"

#include <endian.h>
#include <infiniband/verbs.h>
#include <stdint.h>

typedef struct tb_rc_pub_sub {
	/* Hot: read by the publishing thread for every frame.  The work
	 * requests are templates filled once at subscribe, so a frame costs
	 * a few stores, a countdown and one comparison, not a zeroed
	 * 128-byte struct: every condition that is not the common case (a
	 * signalled request due, the send queue or the receive credit
	 * running out, the ring wrapping, our ring about to lap what is in
	 * flight, a skip to end, a failed QP) is folded into `left` or
	 * fast_tail, and handled in tb_rc_pub_write_slow. */
	/* A small frame's WRITE_WITH_IMM when every QP takes it inline
	 * (tb_rc_pub_send_small): unsignalled, inline, its gather entry the
	 * publisher's one small_sge, so a frame writes its immediate here
	 * and nothing else.  Ready for the next frame: its remote address,
	 * raddr + (wpos & rmask), and imm_next, its immediate (tb_rc_imm of
	 * that offset and its sequence).  A fast-path frame moves both on
	 * by its space (imm_next by one sequence too), and nothing else of
	 * where it goes: wpos catches up at the slow path's entry
	 * (sub_sync, from wpos_addr); sub_fast works them out afresh after
	 * every slow-path step.
	 * Between two steps the fast path never passes the end of the ring
	 * (limit_pos), and every frame comes to every subscriber in the
	 * table, in sequence, so adding is exact.  First, so that the
	 * subscriber's address is the post's argument too: one register for
	 * both, no lea (1 instruction a subscriber an offer, bench_rc's
	 * callgrind). */
	struct ibv_send_wr small_wr;
	uint32_t imm_next;
	struct ibv_qp *qp;
	/* qp's provider post, read once at join: what verbs.h's
	 * ibv_post_send calls (qp->context->ops.post_send), a load less
	 * a frame. */
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr,
			 struct ibv_send_wr **bad);
	uint64_t raddr;
	uint64_t rmask;            /* its ring's size - 1 */
	uint64_t wpos;             /* where its next frame goes (free-running),
				    * as of the last slow-path step: the fast
				    * path moves small_wr's remote address
				    * only, and sub_sync adds what it moved
				    * since wpos_addr */
	uint64_t wpos_addr;        /* small_wr's remote address when wpos was
				    * last brought up to it */
	uint64_t fast_tail;        /* our ring's tail after a frame past
				    * this: the slow path.  pin_limit,
				    * signal_tail and limit_pos in one: a
				    * frame on the fast path moves its place
				    * in its ring and our tail by the same
				    * space, and never moves its place
				    * further (our ring may pad
				    * where its does not: the slow path
				    * comes early, never late).  0: always. */
	int64_t left;              /* requests the fast path may still post
				    * before the slow path is due (a signal,
				    * the SQ or the receive credit: see
				    * sub_limits); each takes one, and
				    * `posted` is left_end - left: the slow
				    * path's entry makes it so (sub_sync) */
	uint32_t chained;          /* batching: requests held in chain[], not
				    * yet posted (counted in left, wpos) */
	struct ibv_send_wr *bad;   /* the provider's answer to a refused
				    * post: here, not on the stack, so the
				    * send keeps no pointer to it across
				    * its posts */
	struct ibv_send_wr wr;     /* the frame's WRITE_WITH_IMM */
	struct ibv_sge sge;
	/* Warm: the slow path. */
	uint64_t posted;           /* work requests posted, as of the last
				    * slow-path step (see `left`) */
	uint64_t left_end;         /* posted + left when `left` was set */
	uint64_t limit_pos;        /* wpos + a frame's space may reach this:
				    * min(credit, the end of its ring) */
	uint64_t pin_limit;        /* our ring's tail past this: the slow path
				    * (0: always, e.g. nothing in flight) */
	uint64_t completed;        /* known complete (last signalled wr_id) */
	uint64_t extra;            /* posted requests that carry no frame
				    * (padding, fences): frames = posted - extra */
	uint64_t next_signal;      /* `posted` at which to signal again */
	uint64_t last_signal;      /* `posted` at the last signalled request */
	uint64_t signal_tail;      /* our ring's tail past this: the next
				    * request is signalled however few came
				    * since the last (sub_limits) */
	uint64_t room_pos;         /* wpos may grow to this, and frames ... */
	uint64_t room_frames;      /* ... to this, by the last credit read */
	uint64_t pin;              /* our ring position its oldest may read */
	int skipping;
	int reads;                 /* it reads back what it misses (rc.h) */
	int anchor_due;            /* its next frame goes behind an anchor */
	_Atomic int dead;          /* its queue pair failed; control removes it
				    * (R1 in the hot path, A1 in ctl_main) */
	struct ibv_send_wr pad_wr; /* the padding WRITE before a wrap */
	struct ibv_sge pad_sge;
	tb_frame_hdr_t pad_hdr;
	struct ibv_send_wr anchor_wr; /* the anchor WRITE before a frame */
	struct ibv_sge anchor_sge;
	tb_frame_hdr_t anchor_hdr;
	struct ibv_cq *cq;
	const _Atomic uint64_t *credit; /* its slot, written by it over RDMA */
	uint32_t rkey;
	uint32_t recv_depth;
	uint64_t laps;             /* frames it was skipped for */
	_Atomic uint64_t skip_first; /* K1: the skipped range; 0 = none */
	_Atomic uint64_t skip_last;
	const char *why_dead;      /* set before dead, read after it */
	/* Cold: control thread. */
	struct ibv_pd *pd;         /* its own: its rkeys reach nothing else */
	struct ibv_mr *credit_mr;
	struct ibv_mr *ring_mr;    /* our ring, registered in its PD (with
				    * REMOTE_READ when it reads back) */
	struct ibv_mr *pos_mr;     /* our ring's intent word, REMOTE_READ */
	tb_counter_mr_t *credit_rec, *ring_rec, *pos_rec; /* the audit's */
	int slot;
	enum ibv_mtu mtu;          /* the path MTU both ends use */
	char client[TB_CONTROL_CLIENT_ID_LEN];
	/* Where the frame a signalled request (wr_id mod the SQ depth) read
	 * ends in our ring: completions come in wr_id order, so when one
	 * completes everything before it has, and nothing still in flight
	 * reads below that.  One entry per SQ slot, so it cannot overflow
	 * however many signalled requests a completion stall piles up. */
	uint64_t pos_end[TB_RC_SQ_DEPTH];
	/* Batching (batch_us): frames written but not yet posted, linked by
	 * `next` since join, posted with one ibv_post_send (see "Batching"). */
	struct ibv_send_wr chain[TB_RC_CHAIN];
	struct ibv_sge chain_sge[TB_RC_CHAIN];
} tb_rc_pub_sub_t;

typedef struct tb_rc_pub_table {
	int n;
	/* sub[n] is NULL (one more than the most): the send's loop stops
	 * there, with no end to keep in a register across its posts. */
	tb_rc_pub_sub_t *sub[TB_RC_MAX_SUBS + 1];
} tb_rc_pub_table_t;

/* A small frame: header and a message of up to 64 bytes, the publisher's
 * inline offer (tb_rc_pub_send_small). */
#define TB_RC_SMALL_FRAME 96u

/* The publisher's hot state: the first member of rc_pub.c's rc_tx_t. */
typedef struct tb_rc_pub {
	tb_tx_t base;              /* first: the ring */
	tb_rc_pub_table_t *_Atomic table; /* read under `reading` */
	/* The table's sub[] when it has a subscriber and every one takes a
	 * small frame inline (inline_small when the table was made), else a
	 * list of none: the small send's list, and its one test for both
	 * (tb_rc_pub_send_small).  Stored before `table`, read under
	 * `reading` as it is, and freed with it. */
	tb_rc_pub_sub_t *const *_Atomic small_subs;
	_Atomic uint64_t reading;  /* R4: odd while a send reads the table;
				    * only the publishing thread stores it */
	int fenced;                /* no membarrier: the fenced ops, and no
				    * membarrier() in readers_wait */
	_Atomic uint32_t inline_max; /* frames up to this go inline: the least
				    * any subscriber's QP was granted (only
				    * lowered, before the table change that
				    * adds it, so a send that sees that
				    * subscriber sees this) */
	_Atomic uint32_t inline_small; /* IBV_SEND_INLINE when inline_max
				    * takes TB_RC_SMALL_FRAME, else 0 (set
				    * with it, ordered as it) */
	uint64_t half;             /* our ring's size / 2 */
	/* The small frame being sent (tb_rc_pub_send_small), written once a
	 * frame: every subscriber's small_wr gathers from small_sge, whose
	 * lkey is never read (an inline request's data is copied at the post,
	 * without a key check: ibv_post_send(3)); the frame's space and what
	 * it adds to an immediate (tb_rc_pub_imm_step), read from here for
	 * each subscriber rather than kept in registers across the posts. */
	struct ibv_sge small_sge;
	uint64_t small_space;      /* 64 bits, as the addresses it is added
				    * to: no extension an offer */
	uint32_t small_step;
	int backpressure;
	/* Batching (batch_us > 0; publishing thread only). */
	uint64_t batch_ns;
	uint64_t held_ns;          /* publish_ns of the oldest held frame */
	uint32_t held;             /* frames sent since the chains were posted */
	tb_tx_ops_t batch_ops;     /* base.ops when batching: send, flush */
} tb_rc_pub_t;

/* Out of line, in rc_pub.c: everything tb_rc_pub_write leaves out (see
 * there), and a post the provider refused (the subscriber is failed, and
 * the request it had counted taken back, with `space` bytes if its
 * address had moved on for it). */
void tb_rc_pub_write_slow(tb_rc_pub_t *t, tb_rc_pub_sub_t *s,
			  const tb_frame_hdr_t *f, uint64_t pos,
			  uint64_t pub_tail, int chain);
void tb_rc_pub_post_failed(tb_rc_pub_sub_t *s, uint32_t space);


/* The send enters the table (rc_pub.c, "The table's one reader"):
 * `reading` is odd until tb_rc_pub_leave, and the caller's load of the
 * table (or of small_subs) comes after it.  `fenced` is a constant at
 * each call site: rc_tx_send and rc_tx_room come in a membarrier and a
 * fenced build, and open picks the ops.  Hot path. */
static inline __attribute__((always_inline)) void
tb_rc_pub_enter_mark(tb_rc_pub_t *t, int fenced)
{
	/* R4: odd first (`reading` is this thread's own: one add); the load
	 * of the table may not rise above it (the writer's membarrier is the
	 * other half of the fence). */
	tb_atomic_own_inc_release(&t->reading);
	if (fenced)
		tb_atomic_fence_full();
	else
		tb_atomic_fence_compiler();
}

/* tb_rc_pub_enter_mark, and the table.  Hot path. */
static inline __attribute__((always_inline)) tb_rc_pub_table_t *
tb_rc_pub_enter(tb_rc_pub_t *t, int fenced)
{
	tb_rc_pub_enter_mark(t, fenced);
	return tb_atomic_load_acquire(&t->table);
}

/* Read back rather than kept from tb_rc_pub_enter: one load, where a
 * value kept across the posts costs a register or a spill and a reload. */
static inline __attribute__((always_inline)) void
tb_rc_pub_leave(tb_rc_pub_t *t)
{
	/* R4 pairs with A4 in table_change (rc_pub.c): done with the
	 * table.  Our own count: one add. */
	tb_atomic_own_inc_release(&t->reading);
}

/* Adds a WRITE_WITH_IMM of frame `f` (`len` bytes) at `remote_addr` in
 * `s`'s ring to its chain, with `flags`; returns it (a signalled one gets
 * its wr_id from the caller).  The caller counts it (posted or left, and
 * wpos) and posts the chain before it holds TB_RC_CHAIN. */
static inline __attribute__((always_inline)) struct ibv_send_wr *
tb_rc_pub_chain_add(tb_rc_pub_sub_t *s, const tb_frame_hdr_t *f, uint32_t len,
		    uint64_t remote_addr, uint32_t imm, unsigned flags)
{
	uint32_t i = s->chained++;

	s->chain_sge[i].addr = (uintptr_t)f;
	s->chain_sge[i].length = len;
	s->chain[i].imm_data = htobe32(imm);
	s->chain[i].wr.rdma.remote_addr = remote_addr;
	s->chain[i].send_flags = flags;
	return &s->chain[i];
}

/* What a frame of `space` bytes adds to the immediate of the next
 * frame after it: its space in the offset bits, one in the sequence's
 * (whose carry out of the top falls off, as the sequence's bits wrap). */
static inline __attribute__((always_inline)) uint32_t
tb_rc_pub_imm_step(uint32_t space)
{
	return space / TB_FRAME_ALIGN + (1u << TB_RC_IMM_OFF_BITS);
}

/*
 * Writes frame `f` (`len` bytes, taking `space` in a ring, `seq_bits` its
 * sequence's part of the immediate, `inl` its inline flag; at our ring
 * position `pos`, our ring's tail `tail` after this send) into `s`'s ring
 * with one WRITE_WITH_IMM, or leaves it to tb_rc_pub_write_slow (which works
 * out the rest from `f` again: fewer values kept across the loop's posts).
 * What is the same for every subscriber comes in by value, worked out
 * once per frame.
 * Hot path: no allocation, lock or system call beyond the provider's post.
 */
static inline __attribute__((always_inline)) void
tb_rc_pub_write(tb_rc_pub_t *t, tb_rc_pub_sub_t *s, const tb_frame_hdr_t *f,
		uint32_t len, uint32_t space, uint32_t seq_bits, unsigned inl, uint64_t pos,
		uint64_t tail, int chain)
{
	uint32_t imm;
	uint64_t raddr;

	/* Taken whichever way the frame goes; the slow path gives it back. */
	if (tb_unlikely(--s->left < 0 || tail > s->fast_tail)) {
		tb_rc_pub_write_slow(t, s, f, pos, tail, chain);
		return;
	}
	/* The offset from imm_next, the sequence's bits from the frame's own
	 * (the same, but this way not relied on: any send may follow). */
	imm = (s->imm_next & TB_RC_IMM_OFF_MASK) | seq_bits;
	raddr = s->small_wr.wr.rdma.remote_addr;
	s->imm_next = imm + tb_rc_pub_imm_step(space);
	s->small_wr.wr.rdma.remote_addr = raddr + space;
	/* Counted before the post (`left`, and the address above), so that
	 * nothing of `s` need outlive the provider's call in a register; a
	 * refused post takes it back. */
	if (chain) {
		/* Unsignalled: its wr_id is never read (an error completion
		 * fails the subscriber whatever it says). */
		tb_rc_pub_chain_add(s, f, len, raddr, imm, inl);
		return;
	}
	s->sge.addr = (uintptr_t)f;
	s->sge.length = len;
	s->wr.imm_data = htobe32(imm);
	s->wr.wr.rdma.remote_addr = raddr;
	s->wr.send_flags = inl;
	if (tb_unlikely(s->post_send(s->qp, &s->wr, &s->bad) != 0))
		tb_rc_pub_post_failed(s, space);
}

/* Writes data frame `f` (`len` bytes, header included, sequence `seq`:
 * its fields, which the caller has at hand), at our ring position `pos`,
 * to every subscriber in `tab` (`chain`: onto its chain, for a later
 * post); `tail`: our ring's tail after this send; `small` (a constant):
 * `len` is at most TB_RC_SMALL_FRAME, so its inline flag is known.  What is the same for every subscriber is
 * worked out once.  A dead subscriber's limits send it to the slow path,
 * which leaves it alone.  Hot path. */
static inline __attribute__((always_inline)) void
tb_rc_pub_frame(tb_rc_pub_t *t, const tb_rc_pub_table_t *tab,
		const tb_frame_hdr_t *f, uint32_t len, uint64_t seq, uint64_t pos,
		uint64_t tail, int chain, int small)
{
	tb_rc_pub_sub_t *const *sp, *s;
	uint32_t space = tb_frame_space(len);
	uint32_t seq_bits = (uint32_t)(seq & TB_RC_IMM_SEQ_MASK)
			    << TB_RC_IMM_OFF_BITS;
	/* Relaxed: ordered before the table change this send's load of the
	 * table saw (see tb_rc_pub_t). */
	unsigned inl = small ? tb_atomic_load_relaxed(&t->inline_small)
		       : len <= tb_atomic_load_relaxed(&t->inline_max)
		       ? IBV_SEND_INLINE : 0;

	for (sp = tab->sub; (s = *sp) != NULL; sp++)
		tb_rc_pub_write(t, s, f, len, space, seq_bits, inl, pos, tail,
				chain);
}

/* The rc publisher behind `tx` when its send is the plain one (lapping,
 * unbatched, membarrier: tb_rc_tx_ops), which tb_rc_pub_send_small does
 * inline; NULL for any other transport or rc stream.  Set-up. */
static inline tb_rc_pub_t *tb_rc_pub_of(tb_tx_t *tx)
{
	return tx->ops == &tb_rc_tx_ops ? (tb_rc_pub_t *)tx : NULL;
}

/* tb_rc_pub_send_small when some subscriber's QP does not take a small
 * frame inline (rc_pub.c; cold). */
void tb_rc_pub_send_by_ref(tb_rc_pub_t *t, const tb_rc_pub_table_t *tab,
			   const tb_frame_hdr_t *f, uint32_t len, uint64_t seq);

/*
 * tb_rc_tx_ops's send of one data frame, `f`, of `len` bytes (header
 * included, at most TB_RC_SMALL_FRAME) and sequence `seq`, just committed
 * at the end of our ring (its tail is just past `f`: a small offer never
 * pads): one WRITE_WITH_IMM to every subscriber.  For tb_rc_pub_of's
 * publishers only.  Inlined in the publisher's rc offer, so that the
 * offer and the send share one prologue and one set of saved registers.
 *
 * Inline (every QP takes a small frame so), a frame fills the publisher's
 * small_sge, space and step once, and then, per subscriber, what differs:
 * its immediate, ready in imm_next, into its small_wr, whose remote
 * address is ready too, and its counts.
 * Across each post the loop keeps only the table position, the publisher
 * and `seq` in registers; the rest it reads back from the publisher (the
 * slow path too: the frame from small_sge, its position tail - space), so
 * nothing is spilled.
 * Hot path: no allocation, lock or system call beyond the provider's post.
 */
static inline __attribute__((always_inline)) void
tb_rc_pub_send_small(tb_rc_pub_t *t, const tb_frame_hdr_t *f, uint32_t len,
		     uint64_t seq)
{
	tb_rc_pub_sub_t *const *sp;
	tb_rc_pub_sub_t *s;

	/* The table's small list, loaded as tb_rc_pub_enter loads the table
	 * (see small_subs): an empty one, when no subscriber or one that
	 * takes a small frame by reference only. */
	tb_rc_pub_enter_mark(t, 0);
	sp = tb_atomic_load_acquire(&t->small_subs);
	s = *sp;
	if (tb_unlikely(!s)) {
		const tb_rc_pub_table_t *tab = tb_atomic_load_acquire(&t->table);

		if (tab->n)
			tb_rc_pub_send_by_ref(t, tab, f, len, seq);
		tb_rc_pub_leave(t);
		return;
	}
	t->small_sge.addr = (uintptr_t)f;
	t->small_sge.length = len;
	t->small_space = tb_frame_space(len);
	t->small_step = tb_rc_pub_imm_step(t->small_space);
	for (; s != NULL; s = *++sp) {
		uint64_t tail = t->base.ring.tail;

		if (tb_unlikely(--s->left < 0 || tail > s->fast_tail)) {
			tb_rc_pub_write_slow(t, s,
					     (const tb_frame_hdr_t *)(uintptr_t)
					     t->small_sge.addr,
					     tail - t->small_space, tail, 0);
			continue;
		}
		/* Its remote address and immediate are ready (see
		 * small_wr); the address moves on once the post has read it. */
		s->small_wr.imm_data = htobe32(s->imm_next);
		s->imm_next += t->small_step;
		/* Counted before the post (`left`), as in tb_rc_pub_write;
		 * its place in its ring moves with the address, after. */
		if (tb_unlikely(s->post_send(s->qp, &s->small_wr, &s->bad) != 0))
			tb_rc_pub_post_failed(*sp, 0); /* s is not kept */
		else
			(*sp)->small_wr.wr.rdma.remote_addr += t->small_space;
	}
	tb_rc_pub_leave(t);
}

#endif
