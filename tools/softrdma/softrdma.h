/*
 * softrdma internal interface: the shared-memory fabric layout and the
 * process-local objects behind the verbs handles.  See softrdma.c for the
 * design essay.  Nothing here is installed; applications see only
 * <infiniband/verbs.h>.
 */
#ifndef SOFTRDMA_H
#define SOFTRDMA_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define SR_EXPORT __attribute__((visibility("default")))
#define SR_LIKELY(x) __builtin_expect(!!(x), 1)
#define SR_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SR_CACHELINE 64

/* Verbs that also have a legacy IBVERBS_1.0 version (compat.c) take their
 * default version explicitly; "@@@" renames the definition. */
#define SR_DEFAULT_V11(name) __asm__(".symver " #name "," #name "@@@IBVERBS_1.1")

/* ---- device limits (reported by ibv_query_device, enforced everywhere) ---- */

/* Slots per fabric.  Slots are fixed-size regions of one sparse tmpfs file,
 * so an unused slot costs address space, not memory. */
#define SR_MAX_PROCS 256
#define SR_MAX_QPS 256          /* qpn = gen << 8 | slot */
#define SR_MAX_CQS 256
#define SR_MAX_MRS 4096         /* key = slot << 8 | key byte (as mlx) */
#define SR_QP_SLOT_BITS 8
#define SR_CQ_SLOT_BITS 8

#define SR_MAX_QP_WR 4096       /* send and receive queue depth (asked) */
#define SR_MAX_SGE 4            /* per send and per receive work request */
#define SR_MAX_SQ_DESC 512      /* bytes of one send WQE, as mlx5's max_sq_desc_sz */
#define SR_CQ_RING 32768        /* entries per CQ ring (a power of two) */
#define SR_MAX_CQE (SR_CQ_RING - 1)
#define SR_MAX_PD 65536
#define SR_MAX_RD_ATOM 16
#define SR_MAX_MSG (1u << 31)   /* max_msg_sz: 2 GiB, as RoCE NICs report */
#define SR_GID_TBL_LEN 256      /* reported, as a ConnectX-5 RoCE port */
#define SR_GID_SLOTS 16         /* entries that can hold a GID */
#define SR_PKEY_TBL_LEN 1
#define SR_DEFAULT_PKEY 0xffff
#define SR_PAGE 4096u
#define SR_PSN_MASK 0xffffffu

/* What ibv_query_device reports: a ConnectX-5, so that tools (perftest)
 * take their mlx5 paths, e.g. the extended send API. */
#define SR_VENDOR_ID 0x02c9
#define SR_VENDOR_PART_ID 4119

#define SR_DEV_NAME "softrdma0"
#define SR_FABRIC_ENV "SOFTRDMA_FABRIC"
#define SR_FABRIC_DEFAULT "default"
#define SR_FABRIC_NAME_MAX 64

/* ---- shared-memory layout ----
 * Every structure below lives in the fabric file and is read by several
 * processes, so each has fixed-width fields, explicit padding and size
 * asserts.  The header's version is written last and checked first. */

#define SR_FABRIC_MAGIC 0x534f465452444d41ull /* "SOFTRDMA" */
#define SR_FABRIC_VERSION 3u

/* sr_gid_shm.type: enum ibv_gid_type + 1; 0 is an empty entry. */
#define SR_GID_EMPTY 0u
struct sr_gid_shm {
	uint8_t raw[16];
	uint32_t type;
	uint32_t pad;
};
_Static_assert(sizeof(struct sr_gid_shm) == 24, "gid entry size");

/* A process is a host with one port: its state, link layer, MTU, LID and
 * GID table are its own (set from the environment at attach, changed by
 * softrdma-ctl), and every request is checked against the ports of both
 * ends.  The GID table is read under a sequence lock (gid_seq odd while it
 * is being written). */
#define SR_CTX_PER_PROC 8
struct sr_port_shm {
	_Atomic uint32_t state;        /* IBV_PORT_ACTIVE or IBV_PORT_DOWN */
	uint32_t link_layer;           /* IBV_LINK_LAYER_ETHERNET or _INFINIBAND */
	uint32_t active_mtu;           /* enum ibv_mtu */
	uint16_t lid, sm_lid;          /* InfiniBand only */
	_Atomic uint32_t gid_seq;
	uint32_t ip;                   /* IPv4 address (network order) */
	uint32_t pad[2];
	struct sr_gid_shm gid[SR_GID_SLOTS];
};
_Static_assert(sizeof(struct sr_port_shm) == 32 + 24 * SR_GID_SLOTS, "port size");

struct sr_proc_shm {            /* one attached process */
	_Atomic int32_t pid;    /* 0 = free */
	uint32_t pad;
	uint64_t starttime;     /* /proc/<pid>/stat field 22: defeats pid reuse */
	_Atomic uint32_t ctx[SR_CTX_PER_PROC]; /* open contexts' ids, 0 = none */
	struct sr_port_shm port;
	uint8_t pad2[512 - 48 - sizeof(struct sr_port_shm)];
};
_Static_assert(sizeof(struct sr_proc_shm) == 512, "proc slot size");

/* sr_mr_shm.kind */
#define SR_KEY_MR 0u
#define SR_KEY_MW1 1u           /* memory window type 1: bound to a PD */
#define SR_KEY_MW2 2u           /* type 2: bound to one QP */

struct sr_mr_shm {              /* a memory region or a memory window */
	_Atomic uint32_t key;   /* current key; 0 = free.  Stored last (release). */
	uint32_t pd_id;
	int32_t pid;            /* owner: where process_vm_writev goes */
	uint32_t access;        /* enum ibv_access_flags (a window's: its bind) */
	uint64_t addr;          /* owner's virtual address */
	uint64_t length;
	uint64_t iova;          /* address the peers (and sges) use */
	uint32_t gen;           /* survives free so keys are not reused at once */
	uint32_t kind;          /* SR_KEY_* */
	_Atomic uint32_t bound; /* a window: 1 while bound */
	uint32_t mw_qpn;        /* a type 2 window: the QP it is bound to */
	uint32_t mr_key;        /* a window: the key of the MR it is bound to */
	uint32_t pad;
};
_Static_assert(sizeof(struct sr_mr_shm) == 64, "mr slot is one cache line");

struct sr_sge_shm {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct sr_rqe {                 /* a posted receive */
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
	struct sr_sge_shm sge[SR_MAX_SGE];
};
_Static_assert(sizeof(struct sr_rqe) == 80, "rqe size");

/* sr_cqe.flags */
#define SR_CQE_SQ 1u            /* requester completion: releases SQ slots */
#define SR_CQE_SOLICITED 2u

struct sr_cqe {                 /* one completion, one cache line */
	_Atomic uint64_t seq;   /* ring position + 1 once published (R1) */
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_data;      /* network byte order, as posted */
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint32_t sq_index;      /* for SR_CQE_SQ: SQ position of this WQE */
	uint32_t flags;
	uint32_t slid;          /* InfiniBand: the sender's LID */
	uint32_t pad;
};
_Static_assert(sizeof(struct sr_cqe) == 64, "cqe is one cache line");

struct sr_cq_shm {
	_Atomic uint32_t in_use;
	uint32_t id;            /* gen << 8 | slot, names the CQ in events */
	int32_t pid;            /* owner */
	uint32_t ctx_id;        /* owner context: async events go there */
	uint32_t cqe;           /* capacity: more pending entries is overrun */
	uint32_t gen;
	_Atomic uint32_t armed; /* SR_ARM_* */
	_Atomic uint32_t error; /* set once on overrun */
	uint32_t chan_id;       /* completion channel, 0 = none */
	uint32_t mask;          /* ring size - 1; ring size > cqe */
	uint8_t pad0[SR_CACHELINE - 40];
	_Alignas(SR_CACHELINE) _Atomic uint64_t tail; /* producers: any process */
	uint8_t pad1[SR_CACHELINE - 8];
	_Alignas(SR_CACHELINE) _Atomic uint64_t head; /* consumer: owner */
	uint8_t pad2[SR_CACHELINE - 8];
	_Alignas(4096) struct sr_cqe e[SR_CQ_RING];
};
#define SR_ARM_NONE 0u
#define SR_ARM_NEXT 1u
#define SR_ARM_SOLICITED 2u
_Static_assert(offsetof(struct sr_cq_shm, tail) == 64, "cq tail line");
_Static_assert(offsetof(struct sr_cq_shm, head) == 128, "cq head line");
_Static_assert(offsetof(struct sr_cq_shm, e) == 4096, "cq ring page");

/* A QP as its peers see it.  The first two lines are written on the set-up
 * path (create, modify) and published by the release store of state; epsn
 * is the responder's expected PSN, advanced by the one requester connected
 * to it. */
struct sr_qp_shm {
	_Atomic uint32_t in_use;
	uint32_t qpn;
	int32_t pid;
	uint32_t ctx_id;
	uint32_t pd_id;
	uint32_t gen;
	uint32_t proc;                 /* owner's proc slot: its port */
	uint32_t qp_type;              /* IBV_QPT_RC or IBV_QPT_UD */
	_Atomic uint32_t state;        /* enum ibv_qp_state */
	_Atomic uint32_t dest_qpn;     /* valid from RTR */
	_Atomic uint32_t access;       /* qp_access_flags (responder side) */
	_Atomic uint32_t min_rnr_timer;/* responder's RNR NAK timer code */
	_Atomic uint32_t qkey;         /* UD: datagrams must carry it */
	_Atomic uint32_t epsn;         /* RC responder: next PSN expected */
	uint32_t path_mtu;             /* RC: enum ibv_mtu, from RTR */
	uint32_t max_dest_rd_atomic;   /* RC: READs it answers at once */
	uint32_t recv_cq, recv_cq_id;  /* CQ slot and id */
	uint32_t send_cq, send_cq_id;
	uint32_t rq_max;               /* max_recv_wr granted: occupancy limit */
	uint32_t rq_max_sge;
	uint32_t rq_mask;              /* ring size - 1 (power of two) */
	uint32_t create_flags;         /* IBV_QP_CREATE_BLOCK_SELF_MCAST_LB */
	uint8_t av_dgid[16];           /* RC: the address vector given at RTR */
	uint16_t av_dlid;
	uint8_t av_sgid_index;
	uint8_t av_is_global;
	uint32_t pad0;
	_Alignas(SR_CACHELINE) _Atomic uint64_t rq_tail; /* producer: owner */
	uint8_t pad1[SR_CACHELINE - 8];
	_Alignas(SR_CACHELINE) _Atomic uint32_t rq_lock; /* consumers: requester or flush */
	uint32_t pad2;
	_Atomic uint64_t rq_head;
	uint8_t pad3[SR_CACHELINE - 16];
	_Alignas(4096) struct sr_rqe rqe[SR_MAX_QP_WR];
};
_Static_assert(offsetof(struct sr_qp_shm, av_dgid) == 96, "qp av");
_Static_assert(offsetof(struct sr_qp_shm, rq_tail) == 128, "rq tail line");
_Static_assert(offsetof(struct sr_qp_shm, rq_lock) == 192, "rq head line");
_Static_assert(offsetof(struct sr_qp_shm, rqe) == 4096, "rq ring page");

/* A multicast group: its MGID and the QPs attached to it.  Changed under
 * the fabric lock (set-up path); read without it by senders. */
#define SR_MAX_MCG 64
#define SR_MCG_MEMBERS 58
struct sr_mcg_shm {
	_Atomic uint32_t in_use;
	uint32_t pad;
	uint8_t gid[16];
	_Atomic uint32_t member[SR_MCG_MEMBERS]; /* qpn; 0 = empty */
};
_Static_assert(sizeof(struct sr_mcg_shm) == 256, "mcg slot size");

struct sr_fabric_shm {
	uint64_t magic;
	_Atomic uint32_t version;      /* written last, checked first */
	uint32_t hdr_size;
	uint64_t total_size;
	uint64_t off_procs, off_mrs, off_cqs, off_qps, off_mcgs;
	uint32_t max_procs, max_mrs, max_cqs, max_qps;
	uint32_t mr_slot_size, cq_slot_size, qp_slot_size, max_mcgs;
	_Atomic uint32_t next_id;      /* PD, context and channel ids */
	uint32_t pad1;
};
_Static_assert(sizeof(struct sr_fabric_shm) == 104, "fabric header size");

/* ---- process-local objects ---- */

struct sr_fabric {              /* this process's attachment */
	int fd;                 /* flock()ed around slot (de)allocation */
	uint8_t *base;
	size_t size;
	pid_t pid;
	uint32_t proc;          /* our sr_proc_shm slot */
	int refs;               /* open contexts */
	int evsock;             /* unbound datagram socket for notifications */
	char name[SR_FABRIC_NAME_MAX + 1];
};

struct sr_context {
	struct verbs_context vctx;     /* must be first: ibv_context is inside */
	struct sr_fabric *fab;
	uint32_t id;
};

struct sr_pd {
	struct ibv_pd pd;
	uint32_t id;
	_Atomic int refs;               /* MRs, MWs, AHs and QPs using it */
};

struct sr_mr {
	struct ibv_mr mr;
	uint32_t slot;
	uint32_t access;
	uint64_t pages;                 /* charged to RLIMIT_MEMLOCK */
};

struct sr_mw {
	struct ibv_mw mw;
	uint32_t slot;
};

struct sr_channel {
	struct ibv_comp_channel ch;
	uint32_t id;
};

struct sr_cq {
	struct ibv_cq cq;
	struct sr_cq_shm *shm;
	uint32_t slot;
	uint64_t pages;                 /* charged to RLIMIT_MEMLOCK */
	_Atomic int refs;               /* QPs using it */
};

/* sr_swqe.xstate: where the executor has it */
#define SR_X_NEW 0u             /* not issued yet */
#define SR_X_DONE 1u            /* issued, status known */
#define SR_X_READ 2u            /* an RDMA READ issued, response pending */

struct sr_swqe {                /* a posted send, process-local */
	uint64_t wr_id;
	uint64_t post_ns;       /* SOFTRDMA_DELAY_NS: when it was posted */
	uint64_t ready_ns;      /* ... and when it may execute (0 = now) */
	uint32_t opcode;        /* enum ibv_wr_opcode */
	uint32_t flags;         /* enum ibv_send_flags, SIGNALED resolved */
	uint32_t imm_data;      /* or invalidate_rkey */
	uint32_t num_sge;
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t length;        /* total message length */
	struct ibv_ah *ah;      /* UD: destination */
	uint32_t remote_qpn;    /* UD */
	uint32_t remote_qkey;   /* UD */
	struct ibv_mw *mw;      /* BIND_MW */
	struct ibv_mw_bind_info bind;
	/* the executor's */
	uint32_t psn;           /* first PSN, assigned when first sent */
	uint32_t psn_set;
	uint32_t xstate;        /* SR_X_* */
	uint32_t status;        /* enum ibv_wc_status once SR_X_DONE */
	uint64_t due_pass;      /* SR_X_READ: the pass its response arrives */
	struct ibv_sge sge[SR_MAX_SGE];
	/* followed by max_inline_data bytes when the WQE is inline */
};

struct sr_qp {
	union {                         /* must be first: the verbs handle */
		struct ibv_qp qp;
		struct ibv_qp_ex qpx;
	};
	int has_qpx;                    /* made with send_ops_flags */
	uint64_t send_ops;              /* IBV_QP_EX_WITH_* allowed */
	struct sr_qp_shm *shm;
	uint32_t slot;
	struct sr_context *ctx;
	struct sr_cq *scq, *rcq;
	struct sr_pd *pd;
	int sq_sig_all;
	struct ibv_qp_cap cap;          /* granted */
	struct ibv_qp_attr attr;        /* what query_qp returns */
	uint64_t pages;                 /* charged to RLIMIT_MEMLOCK */

	pthread_mutex_t rq_lock;        /* serialises the owner's post_recv */

	/* send queue: posters append under sq_lock and publish sq_post with a
	 * release store (R5); the executor (under sr_exec_lock) reads it with
	 * acquire (A5) and owns everything below it. */
	pthread_mutex_t sq_lock;
	uint8_t *sq;                    /* cap.max_send_wr entries of sq_stride */
	size_t sq_stride;
	uint32_t sq_wqe_bytes;          /* the provider-sized WQE, for memlock */
	_Atomic uint32_t sq_post;       /* WQEs posted */
	uint32_t xq_pos;                /* ibv_wr_*: WQEs built since wr_start */
	int xq_err;                     /* ibv_wr_*: first error since wr_start */
	_Atomic uint32_t sq_free;       /* slots released by polled completions */
	/* the executor's, free-running positions compared modulo 2^32 */
	uint32_t sq_issue;              /* next WQE to send */
	_Atomic uint32_t sq_issued;     /* sq_issue, for posters (relaxed) */
	uint32_t sq_done;               /* next WQE to complete */
	uint32_t next_psn;
	uint32_t reads_out;             /* RDMA READs awaiting their response */
	int err_pending;                /* an issued WQE failed: issue no more */
	int stuck;                      /* the head WQE waits on a timer */
	int doom;                       /* ... and then fails with this status */
	uint64_t next_try_ns;
	uint32_t rnr_tries, retry_tries;
	uint64_t last_exec_ns;          /* SOFTRDMA_DELAY_NS pacing */
	int helping;                    /* sr_sq_help: issue no further than */
	uint32_t help_cap;              /* ... help_cap */
	struct sr_ud_held *held;        /* UD reorder fault: SR_UD_HOLD slots */
};

struct sr_ah {
	struct ibv_ah ah;
	struct ibv_ah_attr attr;
};

/* A UD datagram the reorder fault holds back until the next one to the same
 * receiver has gone (or until SR_UD_HOLD_NS passed, or the QP is destroyed). */
#define SR_UD_HOLD 8
#define SR_UD_HOLD_NS 20000000ull
#define SR_UD_MTU_MAX 4096u
#define SR_GRH_LEN 40u
struct sr_ud_held {
	uint32_t used;
	uint32_t dqpn;
	uint32_t imm_data;      /* network order */
	uint32_t flags;         /* enum ibv_send_flags + SR_HELD_IMM */
	uint32_t length;
	uint32_t sgid_type;
	uint8_t dgid[16];
	uint8_t sgid[16];
	uint64_t since_ns;
	uint8_t data[SR_UD_MTU_MAX];
};

/* ---- fabric.c ---- */
struct sr_fabric *sr_fabric_attach(void);
void sr_fabric_detach(struct sr_fabric *fab);
struct sr_fabric *sr_fabric_get(void);  /* attached fabric of this process */
struct sr_mr_shm *sr_fabric_mr(struct sr_fabric *f, uint32_t slot);
struct sr_cq_shm *sr_fabric_cq(struct sr_fabric *f, uint32_t slot);
struct sr_qp_shm *sr_fabric_qp(struct sr_fabric *f, uint32_t slot);
struct sr_mcg_shm *sr_fabric_mcg(struct sr_fabric *f, uint32_t slot);
struct sr_proc_shm *sr_fabric_proc(struct sr_fabric *f, uint32_t slot);
int sr_fabric_lock(struct sr_fabric *f);
void sr_fabric_unlock(struct sr_fabric *f);
void sr_mcg_remove_qpn_locked(struct sr_fabric *f, uint32_t qpn);
int sr_fabric_alloc_slot(struct sr_fabric *f, int kind, uint32_t *slot);
void sr_fabric_free_slot(struct sr_fabric *f, int kind, uint32_t slot);
uint32_t sr_fabric_next_id(struct sr_fabric *f);
void sr_fabric_sockname(const struct sr_fabric *f, pid_t pid, char kind,
			uint32_t id, void *sun, unsigned *len);
void sr_fabric_notify(struct sr_fabric *f, pid_t pid, char kind, uint32_t id,
		      const void *msg, size_t len);
int sr_fabric_bind_socket(struct sr_fabric *f, char kind, uint32_t id);
int sr_fabric_map(struct sr_fabric *f, const char *name); /* softrdma-ctl */
int sr_proc_alive(const struct sr_proc_shm *p);
enum { SR_SLOT_MR, SR_SLOT_CQ, SR_SLOT_QP };

/* ---- process registry (softrdma.c) ---- */
extern struct sr_qp *_Atomic sr_local_qp[SR_MAX_QPS];
extern struct sr_cq *_Atomic sr_local_cq[SR_MAX_CQS];
extern pthread_mutex_t sr_registry_lock;

static inline struct sr_context *sr_ctx(struct ibv_context *c)
{
	return (struct sr_context *)((uint8_t *)c -
				     offsetof(struct verbs_context, context));
}

/* ---- port.c: ports, GID tables, LIDs ---- */
struct sr_gid_entry {
	uint8_t raw[16];
	uint32_t type;          /* SR_GID_EMPTY or enum ibv_gid_type + 1 */
};
void sr_port_init(struct sr_port_shm *p);
struct sr_port_shm *sr_port_of(struct sr_fabric *f, uint32_t proc);
struct sr_port_shm *sr_port_self(struct sr_fabric *f);
int sr_port_gid(struct sr_port_shm *p, uint32_t index, struct sr_gid_entry *e);
int sr_port_has_gid(struct sr_port_shm *p, const uint8_t *raw, uint32_t type);
void sr_port_set_gid(struct sr_port_shm *p, uint32_t index,
		     const uint8_t *raw, uint32_t type);
uint32_t sr_mtu_bytes(uint32_t mtu_enum);
void sr_port_event(struct sr_fabric *f, uint32_t proc, uint32_t type);

/* ---- cq.c ---- */
int sr_cq_push(struct sr_fabric *f, struct sr_cq_shm *cq,
	       const struct sr_cqe *e);
int sr_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sr_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* ---- qp.c / datapath.c ---- */
int sr_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		 struct ibv_send_wr **bad);
int sr_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		 struct ibv_recv_wr **bad);
void sr_qp_set_error(struct sr_fabric *f, struct sr_qp_shm *q);
void sr_qp_fatal(struct sr_fabric *f, struct sr_qp_shm *q);
void sr_rq_flush(struct sr_fabric *f, struct sr_qp_shm *q);
struct sr_swqe *sr_sq_at(struct sr_qp *qp, uint32_t pos);
void sr_sq_fill(struct sr_qp *qp, struct sr_swqe *w);
void sr_sq_publish(struct sr_qp *qp, uint32_t pos);
void sr_sq_help(struct sr_qp *qp, uint32_t before);
int sr_sq_room(struct sr_qp *qp, uint32_t pos);
void sr_exec_lock(void);
void sr_exec_unlock(void);
void sr_exec_register(struct sr_qp *qp);
void sr_exec_unregister(struct sr_qp *qp);
void sr_exec_flush_locked(struct sr_qp *qp);
void sr_exec_reset_locked(struct sr_qp *qp);
void sr_exec_poll(void);        /* ibv_poll_cq drives the engine too */
extern _Atomic int sr_exec_work; /* something may be runnable now */
void sr_progress_atfork_child(void);
void sr_progress_init(void);    /* at load: the progress thread's CPUs */
struct ibv_qp *sr_create_qp_ex(struct ibv_context *ctx,
			       struct ibv_qp_init_attr_ex *ia);

/* ---- qpex.c: the extended send API (ibv_wr_*) ---- */
void sr_qpex_init(struct sr_qp *qp);

/* ---- mr.c ---- */
int sr_memlock_charge(uint64_t pages);
void sr_memlock_uncharge(uint64_t pages);
void sr_memlock_atfork_child(void);
int sr_has_cap(int cap);
/* Translates [addr, addr+len) of key into the owner's address; NULL when
 * the key, owner, PD, access or bounds do not allow it.  qpn: the QP the
 * access arrives on (type 2 windows), 0 for a local key. */
void *sr_mr_translate(struct sr_fabric *f, uint32_t key, pid_t pid,
		      uint32_t pd_id, unsigned need, uint64_t addr,
		      uint64_t len, uint32_t qpn);
struct ibv_mw *sr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int sr_dealloc_mw(struct ibv_mw *mw);
int sr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
int sr_mw_execute_bind(struct sr_qp *qp, struct sr_swqe *w);
int sr_mw_execute_inv(struct sr_qp *qp, uint32_t rkey);

/* ---- ud.c ---- */
int sr_ud_execute(struct sr_qp *qp, struct sr_swqe *w, struct iovec *liov,
		  int ln);
void sr_ud_release_held(struct sr_qp *qp, int all);
int sr_ud_put(struct sr_qp *qp, struct sr_qp_shm *peer, struct iovec *liov,
	      int ln, uint32_t len, uint32_t imm, int has_imm, int solicited,
	      int grh);
int sr_gid_is_mcast(const uint8_t *g);

/* ---- async.c ---- */
#define SR_ASYNC_PORT 0xffu
struct sr_async_msg {
	uint32_t type;          /* enum ibv_event_type */
	uint32_t kind;          /* SR_SLOT_QP, SR_SLOT_CQ or SR_ASYNC_PORT */
	uint32_t slot;
	uint32_t id;            /* qpn or cq id, to detect a reused slot */
};
void sr_async_post(struct sr_fabric *f, pid_t pid, uint32_t ctx_id,
		   uint32_t type, uint32_t kind, uint32_t slot, uint32_t id);

/* ---- fault.c: SOFTRDMA_* settings and faults ---- */
extern int sr_fault_active;     /* any SOFTRDMA_FAIL_VERB configured */
extern uint64_t sr_fault_delay_ns;
void sr_fault_init(void);
int sr_fault_hit(const char *verb); /* errno to fail with, or 0 */
uint64_t sr_fault_delay(void);  /* this WR's added latency, ns */
extern double sr_ud_drop_p, sr_ud_dup_p, sr_ud_reorder_p;
extern int sr_ud_faults;        /* any of the three, or a log */
double sr_ud_rand(void);        /* uniform [0,1), from SOFTRDMA_SEED */
void sr_ud_log(const char *what, uint32_t qpn, uint32_t imm_host,
	       uint32_t byte_len);
extern double sr_rc_drop_p;     /* SOFTRDMA_RC_DROP */
double sr_rc_rand(void);
extern uint32_t sr_grant_inline; /* SOFTRDMA_GRANT_INLINE, UINT32_MAX = off */
extern int sr_poison_wc;         /* SOFTRDMA_POISON_WC */
extern uint64_t sr_spin_ns;      /* SOFTRDMA_SPIN_NS */
extern int sr_no_ipc_lock;       /* SOFTRDMA_NO_IPC_LOCK */
extern int sr_log_errors;        /* SOFTRDMA_LOG_ERRORS: 1 errors, 2 flushes too */

/* ---- device.c ---- */
uint64_t sr_now_ns(void);
void sr_spin_lock(_Atomic uint32_t *l);
void sr_spin_unlock(_Atomic uint32_t *l);

/* Fault hook at the top of each verb: returns from the verb with errno. */
#define SR_FAULT_RET(verb, retval)                                     \
	do {                                                           \
		if (SR_UNLIKELY(sr_fault_active)) {                    \
			int e_ = sr_fault_hit(verb);                   \
			if (e_) {                                      \
				errno = e_;                            \
				return retval;                         \
			}                                              \
		}                                                      \
	} while (0)

#endif
