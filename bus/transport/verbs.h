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
} tb_verbs_dev_t;

/*
 * Opens the device, port and GID that cfg's rdma_device, rdma_port and
 * gid_index name (read as above) and allocates a PD.  `no_ib`: NULL when
 * the transport can use InfiniBand, else why it cannot (ends the message
 * of a refusal).  Returns 0, or with *d zeroed: TB_ENOTSUP (no RDMA device
 * at all; only InfiniBand ports and `no_ib`), TB_ENOENT (no such device or
 * active port), TB_ECONFIG (no such GID), TB_ESYS.
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

/* What a new queue pair needs. */
typedef struct tb_verbs_qp_cfg {
	enum ibv_qp_type type;     /* IBV_QPT_RC or IBV_QPT_UD */
	struct ibv_cq *cq;         /* for both its queues */
	uint32_t send_wr, recv_wr; /* queue depths */
	uint32_t send_sge;         /* scatter entries per send */
	uint32_t inline_want;      /* bytes of inline data asked for ... */
	uint32_t inline_min;       /* ... and the least it can work with */
	unsigned access;           /* RC: remote access (IBV_ACCESS_*) */
	uint32_t qkey;             /* UD */
} tb_verbs_qp_cfg_t;

/*
 * A new queue pair in INIT on d's port: RC with c->access, UD with c->qkey.
 * A device that refuses inline_want is asked again for inline_min (when
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

/*
 * Brings RC queue pair `qp` from INIT through RTR to RTS, connected to
 * `peer` (by GRH on RoCE, by LID on InfiniBand), sending from `my_psn`, at
 * path MTU `mtu`.  A peer that stops answering fails the QP in about half
 * a second.  Returns 0 or TB_ESYS with a message.
 */
int tb_verbs_rc_connect(tb_verbs_dev_t *d, struct ibv_qp *qp,
			const tb_verbs_peer_t *peer, uint32_t my_psn,
			enum ibv_mtu mtu);

/* Brings UD queue pair `qp` from INIT through RTR to RTS.  0 or TB_ESYS. */
int tb_verbs_ud_ready(tb_verbs_dev_t *d, struct ibv_qp *qp);

#endif
