/*
 * transport/verbs.h - the RDMA device of the rc and ud transports: which
 * device, port and GID a stream uses, its protection domain, and the
 * queue-pair set-up the two share.  Set-up only; the transports post and
 * poll with the verbs API directly (there is no wrapper around
 * ibv_post_send and friends).
 *
 * The stream keys (tickbus.h), read one way for both transports:
 *
 *   rdma_device  ""  the first device with an active port the transport
 *                    can use; else the device of that name
 *   rdma_port    0   that device's first such active port; else that
 *                    port, which must be active
 *   gid_index    -1  automatic, by link layer (below); else that index,
 *                    which must hold a GID
 *
 * Both link layers:
 *   RoCE (Ethernet)  every packet carries a GRH (dev.global).  Automatic
 *                    is the first RoCE v2 GID in IPv4-mapped form,
 *                    ::ffff:a.b.c.d: routable, and the form a RoCE NIC
 *                    gives IPv4 multicast.  A port without one (its
 *                    netdev has no IPv4 address) is refused with a message
 *                    that says so: set gid_index to use another GID.
 *   InfiniBand       packets are switched by LID within the subnet.
 *                    Automatic is GID index 0 (the port GID); the port's
 *                    LID is dev.lid, for a peer to address us by.
 * A transport that cannot use InfiniBand says why when it opens the device
 * (tb_verbs_open's `no_ib`): such ports are then passed over, and when they
 * are all a host has, the open fails with that reason, from here, once.
 *
 * Devices no tickbus transport can use are refused here for both, with
 * what to use instead (transport = udp): iWARP (node type RNIC: its
 * connections go through rdma_cm/iw_cm, it has no UD queue pairs and no
 * multicast, and WRITE with immediate only where the provider grants it),
 * usNIC, and AWS EFA (UD and SRD queue pairs only, no multicast attach,
 * unordered delivery).  EFA reports its port's link layer as InfiniBand and
 * a node type of "unspecified", so it is recognised by its node type and
 * its vendor (Amazon, PCI 0x1d0f), never by the link layer.
 *
 * NUMA: the device's node is read from sysfs (<ibdev_path>/device/
 * numa_node) at open; tb_verbs_numa_check() warns when a ring sits on
 * another node, and says which cores to pin to instead.
 *
 * Queue pairs are created with ibv_create_qp_ex naming the send
 * operations the transport posts (tb_verbs_qp_cfg_t.send_ops): a provider
 * then sizes each send WQE for those alone.  Plain ibv_create_qp makes
 * mlx5 reserve room for a memory-window bind in every WQE (a 220-byte
 * inline RDMA WRITE then takes a 448-byte WQE, not 256).  A provider
 * without the extended call gets plain ibv_create_qp.
 *
 * Asynchronous events (CQ errors, fatal QP errors, port and address
 * changes) are read with transport/verbs_events.h.
 *
 * Errors: set-up convention (error.h).  rdma-core's own conventions
 * (ibv_modify_qp and ibv_query_port return a positive errno, ibv_create_qp
 * and ibv_alloc_pd return NULL and set errno) are translated where each
 * verb is called, here.
 *
 * Threads: a device is opened, used for set-up and closed by one thread at
 * a time; what it creates (CQs, QPs, MRs) follows the transport's rules.
 */
#ifndef TB_TRANSPORT_VERBS_H
#define TB_TRANSPORT_VERBS_H

#include <tickbus/tickbus.h>

#include <infiniband/verbs.h>
#include <stdint.h>

#define TB_VERBS_PSN_MASK 0xffffffu   /* PSNs and QP numbers are 24 bits */
#define TB_VERBS_VENDOR_AMAZON 0x1d0fu /* PCI vendor of AWS EFA */

/* One endpoint's device, port, GID and protection domain. */
typedef struct tb_verbs_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[IBV_SYSFS_NAME_MAX];
	uint8_t port;
	uint8_t link_layer;        /* IBV_LINK_LAYER_ETHERNET or _INFINIBAND */
	int global;                /* RoCE: a GRH (is_global) on every packet */
	enum ibv_mtu mtu;          /* the port's active MTU */
	uint16_t lid;              /* InfiniBand: the port's LID; 0 on RoCE */
	int gid_index;
	union ibv_gid gid;         /* our GID */
	int ifindex;               /* RoCE: the GID's netdev; 0 if unknown */
	int numa_node;             /* the device's NUMA node; -1 unknown */
	char ibdev_path[IBV_SYSFS_PATH_MAX]; /* its sysfs directory */
} tb_verbs_dev_t;

/*
 * Opens the device, port and GID that cfg's rdma_device, rdma_port and
 * gid_index name (read as above) and allocates a PD.  `no_ib`: NULL when
 * the transport can use InfiniBand, else why it cannot (ends the message
 * of a refusal).  Returns 0, or with *d zeroed: TB_ENOTSUP (no RDMA device
 * at all; only InfiniBand ports and `no_ib`; only iWARP, usNIC or EFA
 * devices, or one of them named), TB_ENOENT (no such device or active
 * port), TB_ECONFIG (no such GID), TB_ESYS.
 */
int tb_verbs_open(tb_verbs_dev_t *d, const tb_stream_cfg_t *cfg,
		  const char *no_ib);

/* Frees the PD and closes the device; a zeroed *d is a no-op. */
void tb_verbs_close(tb_verbs_dev_t *d);

/* Bytes of a path MTU: IBV_MTU_256 = 256 ... IBV_MTU_4096 = 4096. */
static inline uint32_t tb_verbs_mtu_bytes(enum ibv_mtu mtu)
{
	return 128u << mtu;
}

/* A random 24-bit packet sequence number to start a queue pair at. */
uint32_t tb_verbs_psn_random(void);

/*
 * Inline data that fits one 256-byte send WQE (four 64-byte basic blocks,
 * what mlx5 writes to the doorbell with BlueFlame in one go), for a QP
 * created with only its send operations (tb_verbs_qp_cfg_t.send_ops):
 *   RC RDMA WRITE: 256 - 16 (control) - 16 (remote address) - 4 (inline
 *                  header) = 220
 *   UD SEND:       256 - 16 (control) - 48 (datagram) - 4 = 188
 * One byte more and the WQE takes five blocks.
 */
#define TB_VERBS_INLINE_RC_WRITE 220u
#define TB_VERBS_INLINE_UD_SEND 188u

/* What a new queue pair needs. */
typedef struct tb_verbs_qp_cfg {
	enum ibv_qp_type type;     /* IBV_QPT_RC or IBV_QPT_UD */
	struct ibv_cq *cq;         /* for both its queues */
	struct ibv_pd *pd;         /* NULL: d->pd */
	uint32_t send_wr, recv_wr; /* queue depths */
	uint32_t send_sge;         /* scatter entries per send */
	uint32_t inline_want;      /* bytes of inline data asked for ... */
	uint32_t inline_min;       /* ... and the least it can work with */
	unsigned access;           /* RC: remote access (IBV_ACCESS_*) */
	uint32_t qkey;             /* UD */
	uint64_t send_ops;         /* IBV_QP_EX_WITH_* it will post; 0: not
				    * said (plain ibv_create_qp) */
} tb_verbs_qp_cfg_t;

/*
 * A new queue pair in INIT on d's port: RC with c->access, UD with c->qkey.
 * With c->send_ops, ibv_create_qp_ex (PD and send-ops masks) first, plain
 * ibv_create_qp where the provider lacks it (EOPNOTSUPP, ENOSYS).  A
 * device that refuses inline_want is asked again for inline_min (when
 * lower); the inline bytes granted go to *inline_got (may be NULL).
 * Returns the QP, or NULL with a message.
 */
struct ibv_qp *tb_verbs_qp_create(tb_verbs_dev_t *d, const tb_verbs_qp_cfg_t *c,
				  uint32_t *inline_got);

/* The far end of an RC queue pair, as it told us over the control
 * protocol.  `lid`: InfiniBand only. */
typedef struct tb_verbs_peer {
	uint32_t qpn;
	uint32_t psn;              /* its first packet sequence number */
	uint8_t gid[16];
	uint16_t lid;
} tb_verbs_peer_t;

/* How packets travel between the two ends: the same on both (the
 * publisher decides and ACCEPT carries it). */
typedef struct tb_verbs_path {
	enum ibv_mtu mtu;          /* path MTU, at most both ports' */
	uint8_t sl;                /* InfiniBand service level */
	uint8_t traffic_class;     /* RoCE GRH traffic class */
	uint8_t timeout;           /* ACK timeout, 4.096 us * 2^timeout */
	uint8_t retry;             /* retries before the QP fails */
} tb_verbs_path_t;

/* The path a stream's keys ask for, at `mtu`. */
tb_verbs_path_t tb_verbs_path_of(const tb_stream_cfg_t *cfg, enum ibv_mtu mtu);

/* The smaller of two path MTUs. */
static inline enum ibv_mtu tb_verbs_mtu_min(enum ibv_mtu a, enum ibv_mtu b)
{
	return a < b ? a : b;
}

/*
 * Brings RC queue pair `qp` from INIT through RTR to RTS, connected to
 * `peer` (by GRH on RoCE, with the path's traffic class; by LID and
 * service level on InfiniBand), sending from `my_psn`, along `path`.
 * `peer` must be on the same link layer: a LID of 0 on InfiniBand, or a
 * LID on RoCE, is TB_EINVAL.  Returns 0, TB_EINVAL or TB_ESYS with a
 * message.
 */
int tb_verbs_rc_connect(tb_verbs_dev_t *d, struct ibv_qp *qp,
			const tb_verbs_peer_t *peer, uint32_t my_psn,
			const tb_verbs_path_t *path);

/* Brings UD queue pair `qp` from INIT through RTR to RTS.  0 or TB_ESYS. */
int tb_verbs_ud_ready(tb_verbs_dev_t *d, struct ibv_qp *qp);

/*
 * Ring placement against the device: 1 (and a warning naming `what`, the
 * two nodes and the cores to pin to) when memory on `ring_node` is served
 * by a device on another node, else 0 (same node, or either unknown).
 */
int tb_verbs_numa_check(const tb_verbs_dev_t *d, int ring_node,
			const char *what);

/*
 * Reads the port's attributes and our GID again (after a port or address
 * event): 1 when our GID or LID changed (peers address us by the old one:
 * connections must be made again), 0 when not, or < 0 with a message.
 */
int tb_verbs_refresh(tb_verbs_dev_t *d);

#endif
