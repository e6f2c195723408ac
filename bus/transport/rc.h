/*
 * transport/rc.h - the rc transport: RDMA WRITE-with-immediate into each
 * subscriber's ring, over reliable-connected queue pairs.
 *
 * Each subscriber owns a ring (a power of two, on the NUMA node of its
 * polling core, registered with REMOTE_WRITE on the ring alone) and hands
 * its address, length and rkey to the publisher over the control protocol
 * (control.h).  The publisher writes every frame from its own registered
 * ring (the source, and its retention) into each subscriber's ring with one
 * RDMA WRITE_WITH_IMM; a frame that would straddle the end of a subscriber's
 * ring is preceded by a plain RDMA WRITE of a padding frame there.  Each
 * subscriber's ring has its own write position, so a subscriber that is
 * skipped (lapped) simply sees the next frame it gets carry a later sequence.
 *
 * The immediate (big-endian on the wire, as verbs requires) lets the
 * subscriber cross-check every completion against its own read position:
 *
 *   bits  0..24  ring offset / TB_FRAME_ALIGN (rings are at most 1 GiB)
 *   bits 25..31  the frame's sequence number, low 7 bits
 *
 * Credits.  The subscriber returns what it consumed with an 8-byte RDMA
 * WRITE into its own credit slot on the publisher (a 64-byte slot, the only
 * memory of the publisher it can write):
 *
 *   bits  0..39  ring position consumed up to, modulo 2^40
 *   bits 40..63  receives re-posted beyond the first recv_depth, mod 2^24
 *
 * so the publisher never writes over unread frames and never sends a
 * WRITE_WITH_IMM the subscriber has no receive for (receiver-not-ready
 * would stall that queue pair).
 *
 * Device.  The device, port and GID come from the stream keys as
 * transport/verbs.h reads them for rc and ud alike.  rc runs on RoCE only:
 * on InfiniBand a queue pair is addressed by LID, which version 1 of the
 * control protocol does not carry, so InfiniBand ports are passed over and
 * a host with no other is refused with that reason.
 *
 * Threads: the publishing thread reads the subscriber table under QSBR RCU
 * (liburcu) without locks; the control thread (one per publisher, and one
 * per subscriber) does every TCP exchange (net.h, through rc_ctl.h) and
 * queue-pair set-up.  Every edge between them is labelled where it is
 * made: R1/A1, S1 and V1 in rc_pub.c; R2/A2 to S6 in rc_sub.c.
 *
 * Files: this header (the wire formats above, the constants, the ops),
 * rc_pub.c (the publisher: hot path and control thread), rc_sub.c (the
 * subscriber: poll loop and control thread), rc_ctl.h (the control
 * connection both share).
 */
#ifndef TB_TRANSPORT_RC_H
#define TB_TRANSPORT_RC_H

#include "bus/transport/transport.h"

#include <stdint.h>

#define TB_RC_IMM_OFF_BITS 25u
#define TB_RC_IMM_OFF_MASK ((1u << TB_RC_IMM_OFF_BITS) - 1)
#define TB_RC_IMM_SEQ_MASK 0x7fu

#define TB_RC_CREDIT_POS_BITS 40u
#define TB_RC_CREDIT_POS_MASK ((1ull << TB_RC_CREDIT_POS_BITS) - 1)
#define TB_RC_CREDIT_RECV_MASK 0xffffffu

#define TB_RC_MAX_SUBS 64        /* subscribers per publisher */
#define TB_RC_SQ_DEPTH 1024u     /* publisher send queue, per subscriber */
#define TB_RC_SIGNAL_EVERY 64u   /* one signalled work request in this many */
#define TB_RC_INLINE 224u        /* frames up to this many bytes go inline */
#define TB_RC_RECV_DEPTH 2048u   /* receives a subscriber keeps posted */
#define TB_RC_RECV_BATCH 64u     /* ... re-posted this many at a time */
#define TB_RC_SLOT_SIZE 64u      /* one credit slot: a cache line */

/* The immediate for a frame at ring offset `off` carrying `seq`. */
static inline uint32_t tb_rc_imm(uint64_t off, uint64_t seq)
{
	return (uint32_t)(off / 32u) | (uint32_t)((seq & TB_RC_IMM_SEQ_MASK)
						    << TB_RC_IMM_OFF_BITS);
}

static inline uint64_t tb_rc_imm_offset(uint32_t imm)
{
	return (uint64_t)(imm & TB_RC_IMM_OFF_MASK) * 32u;
}

static inline uint32_t tb_rc_imm_seq_bits(uint32_t imm)
{
	return imm >> TB_RC_IMM_OFF_BITS;
}

static inline uint64_t tb_rc_credit(uint64_t consumed_pos, uint32_t regranted)
{
	return (consumed_pos & TB_RC_CREDIT_POS_MASK) |
	       ((uint64_t)(regranted & TB_RC_CREDIT_RECV_MASK)
		<< TB_RC_CREDIT_POS_BITS);
}

/* The publisher's ops: a lapping stream never asks for room (a slow
 * subscriber is skipped and sees a gap); a back-pressure stream
 * (slow_consumer = backpressure) asks before every claim.  Open picks
 * between them by the stream's configuration. */
extern const tb_tx_ops_t tb_rc_tx_ops;
extern const tb_tx_ops_t tb_rc_bp_tx_ops;
/* The subscriber's ops. */
extern const tb_rx_ops_t tb_rc_rx_ops;

#endif
