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
 * IPv4-mapped form a RoCE NIC uses, ::ffff:a.b.c.d.  The path MTU is the
 * port's active MTU; cfg.mtu, when set, lowers the datagram bound (never
 * above the path MTU).
 *
 * Publisher.  A private ring (ring.h) of cfg.ring_size bytes registered
 * once, a UD QP, an address handle for the group.  `send` packs the
 * committed frames (dgram.h) and posts each ready datagram with one
 * ibv_post_send of SEND_WITH_IMM to the multicast QPN, two SGEs: the
 * packet header, copied into a slot of a small registered header slab that
 * belongs to that send-queue slot, and the frames straight from the ring
 * (zero copy; a datagram's frames never wrap, dgram.h ends a datagram at
 * the ring's end).  Datagrams up to the QP's inline limit go inline.  The
 * immediate is first_seq's low 32 bits in network order.  One WR in
 * sq_depth / 4 is signalled and the send CQ is polled only when the send
 * queue is full, so it never overflows.
 *
 * What the NIC reads after the post stays put until it has read it (the
 * rule dgram.h states, kept here without holding tb_dgram_tx_sent back):
 * the header is copied into the slab slot of its send-queue slot, which is
 * not reused before that WR (or a later signalled one) completes; and the
 * send queue is at most ring_size / (2 * mtu) deep.  To write over a
 * datagram's frames the publisher must first commit ring_size more bytes,
 * at least ring_size - 2 * mtu of them posted (one datagram may be open,
 * one padding frame skipped), which is 2 * depth - 2 datagrams of at most
 * mtu bytes: more than the queue holds, so the datagram has completed.  Batching is dgram.h's: a datagram leaves when full, at
 * each send when batch_us is 0, at a send or tb_pub_flush once its oldest
 * frame is batch_us old.
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
 * A receive ring of TB_UD_RECVS buffers of 40 (GRH) + path MTU bytes,
 * replenished TB_UD_REPOST at a time with one ibv_post_recv.  Poll takes up
 * to TB_UD_POLL completions at once, skips the GRH, checks that the
 * immediate matches first_seq, and hands the datagram to dgram.h, which
 * validates it, counts malformed ones by kind and classifies the frames.
 *
 * Not used by ud: cfg.loopback (every QP attached to the group receives,
 * on this host too, as a NIC delivers; only a QP's own datagrams could be
 * blocked, and the publisher's QP never joins), cfg.rcvbuf (udp only).
 * cfg.ttl is the address handle's hop limit; cfg.interface, when set,
 * chooses the netdev of the IGMP join instead of the GID's.
 *
 * Threads: as transport.h.  send, flush and poll are hot: no allocation,
 * lock or system call (ibv_post_send, ibv_post_recv and ibv_poll_cq are
 * user-space doorbells on a real NIC).
 */
#ifndef TB_TRANSPORT_UD_H
#define TB_TRANSPORT_UD_H

#include "bus/transport/dgram.h"
#include "bus/transport/transport.h"
#include "bus/transport/verbs.h"

#include <infiniband/verbs.h>
#include <stdint.h>

#define TB_UD_GRH 40u
#define TB_UD_MCAST_QPN 0xffffffu
/* Q_Key of a stream: the high bit clear (a controlled Q_Key would be
 * refused), the stream id in the low 24 bits, so that the NIC itself drops
 * another stream's datagrams sent to the same group. */
#define TB_UD_QKEY(stream_id) (0x54000000u | ((stream_id) & 0xffffffu))
/* Receive buffers: 1024 * (40 + 4096) bytes = 4 MiB, a few ms of line rate
 * at 10 Gb/s; reposted 32 at a time (one doorbell per 32 datagrams). */
#define TB_UD_RECVS 1024
#define TB_UD_REPOST 32
#define TB_UD_POLL 16
/* Send queue: at most this deep (and at most ring_size / (2 * mtu)). */
#define TB_UD_SQ_MAX 512
#define TB_UD_SQ_MIN 8
/* Bytes of a datagram small enough to post inline. */
#define TB_UD_INLINE 256
/* ENDs sent at close: one may be lost like any datagram. */
#define TB_UD_END_COPIES 3

/* One endpoint's device and group. */
typedef struct tb_ud_dev {
	tb_verbs_dev_t v;      /* device, port, source GID (and its netdev), PD */
	union ibv_gid mgid;    /* ::ffff:group */
	uint32_t path_mtu;     /* bytes */
	uint32_t mtu;          /* datagram bound: path MTU or cfg.mtu */
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
	tb_packet_hdr_t *slab;        /* one header per send-queue slot */
	uint8_t *ring_mem;
	uint32_t qkey;
	uint32_t sq_depth;
	uint32_t signal_every;
	uint32_t max_inline;
	uint64_t posted;           /* WRs posted on the data QP, ever */
	uint64_t completed;        /* of those, known complete */
	/* The heartbeat thread's own QP, CQ and header. */
	struct ibv_cq *beat_cq;
	struct ibv_qp *beat_qp;
	struct ibv_mr *beat_mr;
	tb_packet_hdr_t *beat_hdr;
	uint64_t beats;            /* beat calls; heartbeat thread only */
	uint64_t beat_prev;        /* sent_next at the previous beat */
	uint64_t beats_skipped;    /* data was flowing: no heartbeat needed */
	/* Statistics, for tests and benchmarks. */
	uint64_t datagrams;
	uint64_t inline_posts;
	uint64_t signalled;
	uint64_t cq_polls;
	uint64_t send_errors;
} tb_ud_tx_t;

typedef struct tb_ud_rx {
	tb_rx_t rx;                /* first: the transport interface */
	tb_dgram_rx_t dg;
	tb_ud_dev_t dev;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *bufs;             /* TB_UD_RECVS * stride */
	uint32_t stride;
	int attached;
	int igmp_fd;               /* holds the IGMP membership; -1 = none */
	uint32_t qkey;
	int got, next;             /* completions in wc[] / the next to use */
	struct ibv_wc wc[TB_UD_POLL];
	int n_repost;              /* buffers done, waiting to be reposted */
	struct ibv_recv_wr rwr[TB_UD_REPOST];
	struct ibv_sge rsge[TB_UD_REPOST];
	/* Statistics beyond dg's. */
	uint64_t bad_imm;          /* immediate missing or not first_seq */
	uint64_t wc_errors;        /* receive completions in error */
	uint64_t reposts;          /* ibv_post_recv calls */
} tb_ud_rx_t;

extern const tb_tx_ops_t tb_ud_tx_ops;
extern const tb_rx_ops_t tb_ud_rx_ops;

/* The IPv4-mapped MGID of an IPv4 multicast address (dotted quad); 0, or
 * TB_ECONFIG when `group` is not one. */
int tb_ud_mgid(const char *group, union ibv_gid *mgid);

#endif
