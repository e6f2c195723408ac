/*
 * transport/ud.h - RDMA UD multicast on the verbs API.  The datagrams are
 * those of udp (packet.h), packed and checked by the shared core (dgram.h);
 * only the way bytes move differs: the NIC replicates one post to every QP
 * attached to the group.
 *
 * Device.  cfg.rdma_device, cfg.rdma_port and cfg.gid_index choose the
 * device, port and source GID as transport/verbs.h reads them for rc and
 * ud alike (automatic GID: the first RoCE v2 GID in IPv4-mapped form).
 * ud runs on RoCE only: multicast on InfiniBand needs a subnet-manager
 * join, which tickbus does not make, so InfiniBand ports are passed over
 * and a host with no other is refused, saying so.  One PD per endpoint.
 * The group is cfg.group, an IPv4 multicast address; its MGID is the
 * IPv4-mapped form a RoCE NIC uses, ::ffff:a.b.c.d.
 *
 * The group's datagram size.  Every member of a group must be able to
 * receive what the publisher sends, and ports of different hosts may have
 * different MTUs (a 4096-byte datagram does not cross a 1024-byte link).
 * cfg.mtu is that bound for the whole group: set it to the same value on
 * every member, at most the smallest port MTU among them; each end refuses
 * an mtu above its own port's.  The publisher's datagrams are at most
 * cfg.mtu (default: its port's MTU) and every header names it (packet.h's
 * `mtu`); a subscriber's receive buffers hold cfg.mtu (default: its own
 * port's MTU), and one that hears a publisher name more than that says so
 * once, in words and in the errors counter: its larger datagrams are lost
 * and come back as gaps.  A receive that completes in error (a datagram
 * too large for its buffer, among others) is reposted; if the QP went to
 * the error state, it is rebuilt.
 *
 * Publisher.  A private ring (ring.h) of cfg.ring_size bytes from
 * tb_mem_alloc (on the publisher core's NUMA node, huge pages where there
 * are any), registered once, a UD QP, an address handle for the group.
 * `send` packs the committed frames (dgram.h, which numbers and signs each
 * datagram) and posts each ready datagram with one ibv_post_send of
 * SEND_WITH_IMM to the multicast QPN, two SGEs: the 64-byte packet header
 * and the frames straight from the ring (zero copy; a datagram's frames
 * never wrap, dgram.h ends a datagram at the ring's end).  The work requests
 * and their SGEs are prepared once at open.  The latency path's post (one
 * frame, unsignalled, inline: tb_ud_send) has a WR of its own whose header
 * is always dgram.h's tx->one: it sets only the frame's address and length
 * and the immediate.  Other posts set the addresses, lengths, flags, wr_id
 * and immediate of the other WR.  A datagram up to the QP's inline
 * limit goes inline, its header read from dgram.h during the post;
 * a larger one's header is copied into a slot of a small registered slab
 * that belongs to that send-queue slot.  The immediate is first_seq's low
 * 32 bits in network order.  Posts go in groups of signal_every (fewer
 * when the queue is short of room): the last of a group is signalled, and
 * posting it reaps the send CQ without waiting and sets the next group to
 * what the queue has room for, so that a failed send is seen within a few
 * posts, the CQ never overflows, and the others post with one decrement
 * as their only test.
 *
 * What the NIC reads after the post stays put until it has read it (the
 * rule dgram.h states, kept here without holding tb_dgram_tx_sent back):
 * the header is copied into the slab slot of its send-queue slot, which is
 * not reused before that WR (or a later signalled one) completes; and the
 * send queue is at most ring_size / (2 * mtu) deep.  To write over a
 * datagram's frames the publisher must first commit ring_size more bytes,
 * at least ring_size - 2 * mtu of them posted (one datagram may be open,
 * one padding frame skipped), which is 2 * depth - 2 datagrams of at most
 * mtu bytes: more than the queue holds, so the datagram has completed.
 * The queue's bound (posted - completed <= depth) is kept by the groups:
 * a group is only as long as the room the queue had when it was set, and
 * its signalled last post waits for room itself.
 * Batching is dgram.h's: a datagram leaves when full, at each send when
 * batch_us is 0, at a send or tb_pub_flush once its oldest frame is
 * batch_us old.
 *
 * A failed send (an error completion: a NIC moves a UD QP to SQE, softrdma
 * to ERR) would flush every later post while the heartbeats, on their own
 * QP, still said "alive".  So the QP is brought back (SQE -> RTS, or ERR ->
 * RESET -> INIT -> RTR -> RTS) by the publishing thread before its next
 * post, when its own reaping saw the error or the heartbeat thread, which
 * looks at the data QP's state every beat, flagged it.  What was flushed
 * is lost, and subscribers are told by the next heartbeat (it names
 * everything posted).
 *
 * A message larger than one datagram is refused at offer with TB_EMSGSIZE
 * (ring.max_frame is capped at tb_dgram_max_frame(mtu)): no fragmentation.
 * Market data messages are tens to hundreds of bytes; a fragmenting
 * transport would turn the loss of one datagram into the loss of every
 * message sharing a fragment train, and need a reassembly buffer and
 * timers on the subscriber's hot path.
 *
 * Heartbeats come from the publisher's heartbeat thread, which must not
 * touch the data QP's send queue (the publishing thread owns it without a
 * lock), so they go out on a second UD QP with its own CQ, carrying
 * tb_dgram_tx_sent_next(): what has been posted, never a held datagram.
 * Two send queues are not ordered with each other on a NIC, so when data
 * was posted since the previous beat the beat waits 1 ms and goes only if
 * nothing more was posted meanwhile (the last datagram has left by then
 * and cannot be overtaken); while data keeps flowing, it alone keeps the
 * subscribers' liveness and the beat is skipped.
 * Close posts END (three copies, like udp) on the data QP behind the last
 * datagram, signalled, and waits for that completion before tearing down.
 *
 * Subscriber.  A UD QP attached to the MGID (ibv_attach_mcast) and, so that
 * switches forward the group to this port, an IGMP membership on the
 * port's netdev (a UDP socket with IP_ADD_MEMBERSHIP on the GID's
 * interface, or on cfg.interface; on softrdma that is loopback, harmless).
 * A receive ring of buffers of 40 (GRH) + the group's mtu, from
 * tb_mem_alloc on the subscriber core's node: cfg.recv_depth of them
 * (default TB_UD_RECVS), never more than the device's max_qp_wr and
 * max_cqe allow (a note says when it capped them).  Buffers are replenished TB_UD_REPOST at a time with one
 * ibv_post_recv.  Poll takes up to TB_UD_POLL completions at once, skips
 * the GRH, checks that the immediate matches first_seq, and hands the
 * datagram to dgram.h, which authenticates it, counts malformed, forged
 * and replayed ones by kind and classifies the frames.  A poll that found
 * nothing to deliver in one batch of completions returns (a flood of
 * rubbish cannot hold the caller).  A receive completed in error is
 * reposted, unless the QP is in the error state (every receive then
 * flushes): the QP and its CQ are then made anew, the buffers posted and
 * the group joined again, at most every TB_UD_REBUILD_NS; what was lost
 * meanwhile comes back as a gap at the next datagram or heartbeat.
 *
 * Not used by ud: cfg.rcvbuf (udp's socket buffer), cfg.loopback (every
 * QP attached to the group receives, on this host too, as a NIC delivers;
 * only a QP's own datagrams could be blocked, and the publisher's QP never
 * joins).  cfg.ttl is the address handle's hop limit, and
 * cfg.rdma_traffic_class its GRH traffic class (rc's key: default 106,
 * DSCP 26 with ECN, the lossless class of a usual RoCE fabric);
 * cfg.interface, when set, chooses the netdev of the IGMP join instead of
 * the GID's.
 *
 * Threads: as transport.h.  send, flush and poll are hot: no allocation,
 * lock or system call (ibv_post_send, ibv_post_recv and ibv_poll_cq are
 * user-space doorbells on a real NIC) but on the error paths above.
 */
#ifndef TB_TRANSPORT_UD_H
#define TB_TRANSPORT_UD_H

#include "bus/counters.h"
#include "bus/mem.h"
#include "bus/transport/dgram.h"
#include "bus/transport/transport.h"
#include "bus/transport/verbs.h"
#include "bus/transport/verbs_events.h"

#include <endian.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>

#define TB_UD_GRH 40u
#define TB_UD_MCAST_QPN 0xffffffu
/* Q_Key of a stream: the high bit clear (a controlled Q_Key would be
 * refused), the stream id in the low 24 bits, so that the NIC itself drops
 * another stream's datagrams sent to the same group. */
#define TB_UD_QKEY(stream_id) (0x54000000u | ((stream_id) & 0xffffffu))
/* Receive buffers when cfg.recv_depth is 0: 4096 datagrams, four times
 * the ~100 us of a line-rate burst that 1024 held (17 MB at mtu 4096,
 * 4.4 MB at the 1024 of a 1500-byte Ethernet); recv_depth is at least
 * TB_UD_RECVS_MIN (the config's lower bound, a few reposts' worth).
 * Reposted 32 at a time (one doorbell per 32 datagrams). */
#define TB_UD_RECVS 4096u
#define TB_UD_RECVS_MIN 256u
#define TB_UD_REPOST 32
#define TB_UD_POLL 16
/* An idle subscriber reads the device's asynchronous events at most this
 * often (one system call; a busy one sees failures in its completions). */
#define TB_UD_EVENTS_NS 10000000ull
/* A QP in the error state is rebuilt (receive) or brought back (send) at
 * most this often, so that a device that keeps failing costs at most a
 * small share of a hot core in system calls. */
#define TB_UD_REBUILD_NS 1000000ull
/* Send queue: at most this deep (and at most ring_size / (2 * mtu)), a
 * power of two; one WR in TB_UD_SIGNAL_EVERY (or a quarter of the queue,
 * if less) is signalled.  Each signalled post brings the reap and the next
 * group's bound, about 70 instructions of tickbus code: once in 16 posts
 * that was 4.4 an offer, once in 64 it is 1.1 (bench_rc's callgrind). */
#define TB_UD_SQ_MAX 512
#define TB_UD_SQ_MIN 8
#define TB_UD_SIGNAL_EVERY 64
/* Bytes of a datagram small enough to post inline: what fits one 256-byte
 * send WQE on a UD QP created with only its send operations (256 - 16
 * control - 48 datagram segment - 4 inline header); 256 took five 64-byte
 * blocks. */
#define TB_UD_INLINE TB_VERBS_INLINE_UD_SEND
/* ENDs sent at close: one may be lost like any datagram. */
#define TB_UD_END_COPIES 3

/* One endpoint's device and group. */
typedef struct tb_ud_dev {
	tb_verbs_dev_t v;      /* device, port, source GID (and its netdev), PD */
	int gid_cfg;           /* cfg.gid_index: -1 = automatic */
	union ibv_gid mgid;    /* ::ffff:group */
	uint32_t path_mtu;     /* bytes */
	uint32_t mtu;          /* the group's datagram bound: cfg.mtu or path */
	uint32_t max_qp_wr;    /* the device's limits */
	int max_cqe;
} tb_ud_dev_t;

typedef struct tb_ud_tx {
	tb_tx_t tx;                /* first: the ring */
	tb_dgram_tx_t dg;
	tb_ud_dev_t dev;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_ah *ah;
	struct ibv_mr *ring_mr;
	struct ibv_mr *slab_mr;
	tb_counter_mr_t *ring_rec, *slab_rec, *beat_rec; /* the audit's */
	tb_mem_t ring_mem;
	tb_mem_t slab_mem;
	tb_packet_hdr_t *slab;     /* one header per send-queue slot */
	uint32_t qkey;
	uint32_t sq_depth;         /* a power of two */
	uint32_t signal_every;
	/* Posts up to and including the next signalled one, at least 1.
	 * The send queue has room for all but that last one, which makes
	 * its own (tb_ud_post_signalled): posted - completed + left - 1 <
	 * sq_depth, so an unsignalled post needs no other test. */
	uint32_t left;
	uint32_t max_inline;
	uint8_t hop_limit;         /* cfg.ttl, for address handles */
	uint8_t traffic_class;     /* cfg.rdma_traffic_class, likewise */
	/* Frame bytes a datagram may carry and still go inline: max_inline
	 * less the header; negative when not even a header goes inline. */
	int64_t inline_frames;
	uint64_t posted;           /* WRs posted on the data QP, ever */
	uint64_t completed;        /* of those, known complete */
	/* The work request of every post but the fast one, prepared at open;
	 * its wr_id is the WR's number (posted after it). */
	struct ibv_send_wr wr;
	struct ibv_sge sge[2];
	/* The fast post's (tb_ud_send): one unsignalled datagram of
	 * tb_dgram_tx_one, inline, its header dg.one; a post sets only the
	 * frame's address and length and the immediate.  Its wr_id is set
	 * only when it goes signalled (its number) and at a repair (the
	 * next number): an unsignalled one carries a number no larger than
	 * its own, so `completed` never runs ahead, and larger than
	 * recovered_at, so a failure of it is told from old news (reap). */
	struct ibv_send_wr one_wr;
	struct ibv_sge one_sge[2];
	/* qp's provider post, read when the QP is made: what verbs.h's
	 * ibv_post_send calls (qp->context->ops.post_send), a load less
	 * a datagram, as rc_pub.h's. */
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr,
			 struct ibv_send_wr **bad);
	struct ibv_send_wr *one_bad; /* the provider's answer to a refused
				      * fast post: kept here, not on the
				      * offer's stack, which then needs
				      * no frame */
	/* The counters of the publisher whose offer inlines this send
	 * (tb_ud_send_frame), which counts a failed one there: reached
	 * from here, the offer keeps no pointer to the publisher across
	 * its calls. */
	tb_counter_slot_t *offer_ctr;
	/* Set by the heartbeat thread (its look at the QP, the device's
	 * events) or the publishing thread's own reaping when the data QP
	 * left RTS, or something else needs repair before the next post;
	 * the publishing thread repairs it (R2/A2 in ud.c). */
	_Atomic int broken;
	_Atomic int remake;        /* the data CQ failed: CQ and QP anew */
	_Atomic int readdress;     /* our GID moved: an AH from new_gid_index */
	int new_gid_index;         /* written before readdress (R3/A3) */
	uint64_t recover_ns;       /* a try that failed: when; else 0 */
	uint64_t recovered_at;     /* `posted` at the last repair */
	/* The data QP and CQ, between the heartbeat thread's look at them
	 * and their remaking; never taken on the hot path. */
	pthread_mutex_t qp_lock;
	int qp_lock_made;
	/* The heartbeat thread's own QP, CQ, address handle and header. */
	struct ibv_cq *beat_cq;
	struct ibv_qp *beat_qp;
	struct ibv_ah *beat_ah;
	struct ibv_mr *beat_mr;
	tb_packet_hdr_t *beat_hdr;
	int port_down;             /* heartbeat thread: said so already */
	uint64_t beats;            /* beat calls; heartbeat thread only */
	uint64_t beat_prev;        /* sent_next at the previous beat */
	uint64_t beats_skipped;    /* data was flowing: no heartbeat needed */
	/* Statistics, for tests and benchmarks (tb_ud_tx_datagrams and
	 * tb_ud_tx_inline_posts count from these and `posted`). */
	uint64_t ends;             /* END copies posted */
	uint64_t copied;           /* posts whose header went to the slab */
	uint64_t signalled;
	uint64_t cq_polls;
	uint64_t send_errors;
	uint64_t recoveries;       /* data QP brought back to RTS */
	uint64_t remakes;          /* data CQ and QP made anew */
	uint64_t readdresses;      /* address handle made for a new GID */
	uint64_t beat_recoveries;  /* the heartbeat QP, likewise */
	uint64_t events;           /* asynchronous events read */
} tb_ud_tx_t;

typedef struct tb_ud_rx {
	tb_rx_t rx;                /* first: the transport interface */
	tb_dgram_rx_t dg;
	tb_ud_dev_t dev;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	tb_counter_mr_t *rec;      /* the audit's record of mr */
	tb_mem_t buf_mem;
	uint8_t *bufs;             /* depth * stride */
	uint32_t stride;
	uint32_t depth;            /* receive buffers, all posted when idle */
	int attached;
	int igmp_fd;               /* holds the IGMP membership; -1 = none */
	uint32_t qkey;
	int got, next;             /* completions in wc[] / the next to use */
	struct ibv_wc wc[TB_UD_POLL];
	int n_repost;              /* buffers done, waiting to be reposted */
	struct ibv_recv_wr rwr[TB_UD_REPOST];
	struct ibv_sge rsge[TB_UD_REPOST];
	int broken;                /* the QP is in error: rebuild it */
	uint64_t rebuilt_ns;       /* when it last was */
	uint64_t events_ns;        /* when the events were last read */
	int port_down;             /* said so already */
	char name[TB_NAME_MAX];    /* the stream's, for messages */
	char interface[TB_HOST_MAX]; /* cfg.interface, to join again */
	/* Statistics beyond dg's. */
	uint64_t bad_imm;          /* immediate missing or not first_seq */
	uint64_t wc_errors;        /* receive completions in error */
	uint64_t reposts;          /* ibv_post_recv calls */
	uint64_t rebuilds;         /* QP and CQ made anew */
	uint64_t events;           /* asynchronous events read */
} tb_ud_rx_t;

extern const tb_tx_ops_t tb_ud_tx_ops;
extern const tb_rx_ops_t tb_ud_rx_ops;

/* The IPv4-mapped MGID of an IPv4 multicast address (dotted quad); 0, or
 * TB_ECONFIG when `group` is not one. */
int tb_ud_mgid(const char *group, union ibv_gid *mgid);

/* ------------------------------------------------------ the hot path
 * The publisher's offer inlines ud's send (publisher.c), as it does rc's
 * (rc_pub.h): one frame without batching is packed, signed and posted
 * with what the offer holds in registers, no call to the op.  The rest
 * stays out of line in ud.c. */

/* Takes the completions the send CQ holds (an error among them flags the
 * QP for repair); returns what ibv_poll_cq did.  Makes room in a full
 * send queue (0, or TB_EIO).  A post the provider refused: counted,
 * flagged, TB_EIO.  The drain of anything but one unbatched frame; the
 * one frame when its post is not the fast one. */
int tb_ud_reap(tb_ud_tx_t *u);
int tb_ud_sq_room(tb_ud_tx_t *u);
int tb_ud_post_failed(tb_ud_tx_t *u);
int tb_ud_post_signalled(tb_ud_tx_t *u, const tb_packet_hdr_t *hdr,
			 const void *frames, uint32_t frames_len);
int tb_ud_send_rest(tb_ud_tx_t *u, uint64_t to);
int tb_ud_send_one_signalled(tb_ud_tx_t *u, const tb_frame_hdr_t *f,
			     uint32_t space, uint64_t seq, uint64_t to);
int tb_ud_send_one_slow(tb_ud_tx_t *u, const tb_frame_hdr_t *f,
			uint32_t space, uint64_t to);

/* Sets `wr` (the prepared one) for one datagram: header inline when it
 * fits, else copied to the slab slot of this send-queue slot; returns its
 * send flags.  Hot path. */
static inline __attribute__((always_inline)) unsigned
tb_ud_wr_set_(tb_ud_tx_t *u, const tb_packet_hdr_t *hdr, const void *frames,
	      uint32_t frames_len)
{
	struct ibv_send_wr *wr = &u->wr;
	unsigned flags = 0;

	if ((int64_t)frames_len <= u->inline_frames) {
		/* Copied into the WQE by the post itself. */
		u->sge[0].addr = (uintptr_t)hdr;
		flags = IBV_SEND_INLINE;
	} else {
		/* The NIC reads it later: the slab slot is this WR's until it
		 * completes. */
		tb_packet_hdr_t *h = &u->slab[u->posted & (u->sq_depth - 1)];

		*h = *hdr;
		u->sge[0].addr = (uintptr_t)h;
		u->copied++;
	}
	u->sge[1].addr = (uintptr_t)frames;
	u->sge[1].length = frames_len;
	wr->num_sge = frames_len ? 2 : 1;
	wr->wr_id = u->posted + 1;
	wr->imm_data = htobe32((uint32_t)hdr->first_seq);
	return flags;
}

/* Posts one datagram (header + frames) on the data QP, from the work
 * request prepared at open; signalled when `signal` or when it ends its
 * group of `left` (then tb_ud_post_signalled, out of line: it makes room
 * if need be, and reaps after).  Room for the others: `left` was.  Hot
 * path. */
static inline __attribute__((always_inline)) int
tb_ud_post_one(tb_ud_tx_t *u, const tb_packet_hdr_t *hdr, const void *frames,
	       uint32_t frames_len, int signal)
{
	struct ibv_send_wr *bad;

	if (tb_unlikely(--u->left == 0 || signal))
		return tb_ud_post_signalled(u, hdr, frames, frames_len);
	u->wr.send_flags = tb_ud_wr_set_(u, hdr, frames, frames_len);
	if (tb_unlikely(ibv_post_send(u->qp, &u->wr, &bad) != 0))
		return tb_ud_post_failed(u);
	u->posted++;
	return 0;
}

/* The fast post of tb_ud_send and tb_ud_send_frame: frame `f` (sequence
 * `seq`, `space` bytes, ending at `to`) is the only one to send, nothing
 * open or held, and its datagram goes inline.  The fast WR's fields are
 * set while the frame's are in registers, then the datagram numbered,
 * signed and posted; the last of a group through
 * tb_ud_send_one_signalled.  Hot path. */
static inline __attribute__((always_inline)) int
tb_ud_send_fast_(tb_ud_tx_t *u, const tb_frame_hdr_t *f, uint32_t space,
		 uint64_t seq, uint64_t to)
{
	int rc = 0;

	if (tb_unlikely(--u->left == 0))
		return tb_ud_send_one_signalled(u, f, space, seq, to);
	u->one_sge[1].addr = (uintptr_t)f;
	u->one_sge[1].length = space;
	u->one_wr.imm_data = htobe32((uint32_t)seq);
	tb_dgram_tx_one_sign(&u->dg, f, seq, space, to);
	if (tb_unlikely(u->post_send(u->qp, &u->one_wr, &u->one_bad) != 0))
		rc = tb_ud_post_failed(u); /* room: `left` was */
	else
		u->posted++;
	tb_dgram_tx_sent_to(&u->dg, seq + 1); /* sent or not, it is gone */
	return rc;
}

/* ud's send of the frames committed up to `to` (transport.h).  Hot path:
 * no allocation, lock or system call.  One frame and no batching (the
 * latency path): the fast post when it goes inline, through
 * tb_ud_send_one_slow when larger; anything else through the datagram
 * core's drain. */
static inline __attribute__((always_inline)) int tb_ud_send(tb_ud_tx_t *u,
							    uint64_t to)
{
	const tb_frame_hdr_t *f;
	uint32_t space;

	if (tb_unlikely(tb_atomic_load_relaxed(&u->broken)) ||
	    (f = tb_dgram_tx_one_frame(&u->dg, to, &space)) == NULL)
		return tb_ud_send_rest(u, to);
	if (tb_unlikely((int64_t)space > u->inline_frames))
		return tb_ud_send_one_slow(u, f, space, to);
	return tb_ud_send_fast_(u, f, space, f->seq, to);
}

/* tb_ud_send for a caller that has just committed data frame `f` (sequence
 * `seq`, `space` bytes) at ring position `at`, up to `to`, and holds its
 * fields in registers (the publisher's offer): the same sends, without
 * finding the frame again.  An unbatched stream only (tb_ud_tx_of), and
 * a frame that goes inline (tb_ud_tx_inline_takes, asked at open).  Hot
 * path. */
static inline __attribute__((always_inline)) int
tb_ud_send_frame(tb_ud_tx_t *u, const tb_frame_hdr_t *f, uint32_t space,
		 uint64_t seq, uint64_t at, uint64_t to)
{
	if (tb_unlikely(tb_atomic_load_relaxed(&u->broken)) ||
	    tb_unlikely(!tb_dgram_tx_one_at(&u->dg, at)))
		return tb_ud_send_rest(u, to);
	return tb_ud_send_fast_(u, f, space, seq, to);
}

/* 1 when a frame of `space` bytes goes inline in its datagram on this
 * stream's QP, now and after any remake (tx_qp_open), else 0.  The
 * publisher asks at open, for the largest frame it hands to
 * tb_ud_send_frame.  Set-up. */
static inline int tb_ud_tx_inline_takes(const tb_ud_tx_t *u, uint32_t space)
{
	return (int64_t)space <= u->inline_frames;
}

/* Data datagrams posted, and posts whose header went inline. */
static inline uint64_t tb_ud_tx_datagrams(const tb_ud_tx_t *u)
{
	return u->posted - u->ends;
}

static inline uint64_t tb_ud_tx_inline_posts(const tb_ud_tx_t *u)
{
	return u->posted - u->copied;
}

/* The ud publisher behind `tx`, whose send the offer may inline
 * (tb_ud_send_frame); NULL for another transport, or a batching ud
 * stream (batch_us: its offer calls the send op, which batches).
 * Set-up. */
static inline tb_ud_tx_t *tb_ud_tx_of(tb_tx_t *tx)
{
	return tx->ops == &tb_ud_tx_ops && ((tb_ud_tx_t *)tx)->dg.batch_ns == 0
	       ? (tb_ud_tx_t *)tx : NULL;
}

#endif
