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
 * Isolation.  Each subscriber's QP, credit slot and the publisher's
 * registration of its own ring for that subscriber live in a protection
 * domain of their own: an rkey is checked against the PD of the QP it
 * arrives on, so a subscriber can reach its own credit slot and nothing
 * else, even knowing another's rkey (mlx5 and softrdma hand them out in
 * sequence).  The price is one registration of the publisher's ring per
 * subscriber, each pinned on its own (bus/memlock.h counts it).
 *
 * Joining.  SUBSCRIBE -> ACCEPT -> READY (control.h): the publisher's QP is
 * in RTS when it sends ACCEPT, and the subscriber enters the publisher's
 * table only on READY, once its own QP is in RTR: a frame written earlier
 * would meet a QP that cannot take it and wait out an ACK timeout (or fail
 * it).  The path MTU is the publisher's choice, min(its port's, the
 * subscriber's), and ACCEPT carries it with the service level and traffic
 * class, so both QPs use the same.
 *
 * Device.  The device, port and GID come from the stream keys as
 * transport/verbs.h reads them for rc and ud alike, and the path from
 * rdma_traffic_class, rdma_timeout, rdma_retry and rdma_sl.  rc runs on
 * RoCE (by GID, with a GRH) and on InfiniBand (by LID, at the service
 * level); both ends must be on the same link layer.  Memory every set-up
 * pins is checked against RLIMIT_MEMLOCK before it is made (memlock.h).
 *
 * Reading back (one-sided recovery).  A subscriber that asks (SUBSCRIBE's
 * READ flag) fills a gap the publisher made by skipping it on its own, with
 * RDMA READ from the publisher's ring, which still holds the frames for a
 * while: the publisher registers its ring in that subscriber's PD with
 * REMOTE_READ and nothing else (the same registration its WRITEs send
 * from), and its ring's position word (intent: how far its writing may
 * have reached, bus/ring.h) likewise, and ACCEPT hands both rkeys over.
 * The publisher's CPU does nothing for a READ.  To know where its missing
 * frames lie in the publisher's ring, the subscriber follows the
 * publisher's ring position:
 *
 *   - before the first frame it writes to a subscriber after READY, and
 *     after every skip, the publisher writes an anchor into that
 *     subscriber's ring: a 32-byte padding frame of template TB_RC_ANCHOR
 *     whose seq is the next frame's and whose publish_ns is where that
 *     frame starts in the publisher's ring (a slow-path WRITE, inline,
 *     chained before the frame's, so it lands first);
 *   - from there the subscriber moves its copy of the position by every
 *     frame it takes, the way the publisher's ring lays them out (a frame
 *     that would straddle the end starts again at offset 0, behind a
 *     padding frame), so it knows where the frame after its last one is.
 *
 * A gap [F, L] thus lies exactly between the position after the last frame
 * and the anchor of L + 1.  The subscriber keeps L + 1 where it is (in its
 * ring and its CQ: the publisher cannot write over what is not credited),
 * READs that span into a local buffer (in windows of TB_RC_READ_BUF), then
 * READs the position word, fenced behind the data, and takes the frames
 * only if the publisher had not claimed its way into the first of them by
 * then (intent + 2 largest frames <= start + ring size: the margin is what
 * a claim given back may have written; a torn or overwritten frame is
 * never taken), each is the next sequence of the stream, whole and within
 * the ring, and the span ends exactly at the anchor.  They are delivered in
 * order, with TB_MSG_F_REPLAY, before L + 1.  Anything else -- the frames
 * gone, a check failed, a READ refused -- reports what is still missing
 * upward as the lap it is (TB_LAPPED), and recovery (subscriber/
 * recovering.c) fetches it over TCP.  The position survives a reconnect to
 * the same ring (ACCEPT's ring_id), so frames missed while reconnecting are
 * read back too; on a quiet stream the range a heartbeat names is read the
 * same way, up to its last sequence.
 *
 * Batching (batch_us > 0): frames are held per subscriber, up to
 * TB_RC_CHAIN, and written with one post (rc_pub.c, "Batching").
 *
 * Loss is told within a heartbeat.  A subscriber the publisher skips (no
 * room) sees the gap with the next frame it gets; on a stream that then
 * goes quiet there is no next frame, so every heartbeat the publisher
 * sends a skipped subscriber names the range it skipped, and the
 * subscriber reports it (TB_LAPPED) once it has every frame before it.
 *
 * Threads: the publishing thread reads the subscriber table without locks
 * or per-message fences (rc_pub.c, "The table's one reader"); the control
 * thread (one per publisher, and one per subscriber) does every TCP
 * exchange (net.h, through rc_ctl.h), queue-pair set-up and the device's
 * asynchronous events (verbs_events.h).  Every edge between them is
 * labelled where it is made: R1/A1, R4/A4, K1/K2, S1 and V1 in rc_pub.c;
 * R2/A2 to S6 in rc_sub.c.
 *
 * Files: this header (the wire formats above, the constants, the ops),
 * rc_pub.c (the publisher: hot path and control thread), rc_sub.c (the
 * subscriber: poll loop and control thread), rc_ctl.h (the control
 * connection both share).
 */
#ifndef TB_TRANSPORT_RC_H
#define TB_TRANSPORT_RC_H

#include "bus/transport/transport.h"
#include "bus/transport/verbs.h"

#include <stdint.h>

#define TB_RC_IMM_OFF_BITS 25u
#define TB_RC_IMM_OFF_MASK ((1u << TB_RC_IMM_OFF_BITS) - 1)
#define TB_RC_IMM_SEQ_MASK 0x7fu

#define TB_RC_CREDIT_POS_BITS 40u
#define TB_RC_CREDIT_POS_MASK ((1ull << TB_RC_CREDIT_POS_BITS) - 1)
#define TB_RC_CREDIT_RECV_MASK 0xffffffu

#define TB_RC_MAX_SUBS 64        /* subscribers per publisher */
#define TB_RC_SQ_DEPTH 1024u     /* publisher send queue, per subscriber; a
				  * power of two (wr_id indexes by it) */
#define TB_RC_SIGNAL_EVERY 128u  /* one signalled work request in this many,
				  * or sooner: see TB_RC_SIGNAL_SPAN.  Each
				  * brings the slow path (a completion to
				  * poll, the limits worked out again): at
				  * 128 it costs an offer 2 instructions, at
				  * 64 it cost 4; the SQ (1024) holds 8 */
#define TB_RC_SIGNAL_SPAN 4u     /* ... or once the frames since the last
				  * span 1/this of the publisher's ring */
#define TB_RC_INLINE TB_VERBS_INLINE_RC_WRITE /* frames up to this many
				  * bytes go inline: one 256-byte WQE */
#define TB_RC_RECV_DEPTH 2048u   /* receives a subscriber keeps posted */
#define TB_RC_RECV_BATCH 64u     /* ... re-posted this many at a time */
#define TB_RC_SLOT_SIZE 64u      /* one credit slot: a cache line */
#define TB_RC_ANCHOR 0x4e41u     /* template of an anchor ("AN"): a padding
				  * frame whose publish_ns is the next
				  * frame's position in the publisher's ring */
#define TB_RC_ANCHOR_LEN 32u     /* an anchor: one frame header */
#define TB_RC_READ_BUF (1u << 20) /* a subscriber reads back this much at
				  * once, at most (and at most its ring) */
#define TB_RC_CHAIN 16u          /* batching: frames held per subscriber
				  * and posted together, at most; a burst of
				  * 16 costs one doorbell, and 16 WQEs of 64
				  * to 256 bytes stay well inside the SQ */
#define TB_RC_RD_ATOMIC 4u       /* READs a publisher's QP answers at once:
				  * a window in two pieces, the position */

_Static_assert((TB_RC_SQ_DEPTH & (TB_RC_SQ_DEPTH - 1)) == 0, "SQ depth: 2^n");

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
