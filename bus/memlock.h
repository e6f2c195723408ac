/*
 * memlock.h - the locked-memory budget of RDMA set-up.
 *
 * Memory a NIC reads or writes is pinned: every memory region, and the
 * provider's own rings behind each queue pair (send and receive queues)
 * and completion queue, count against RLIMIT_MEMLOCK (the kernel charges
 * them to the process's pinned_vm in ib_umem_get) unless the process has
 * CAP_IPC_LOCK.  Past the limit the verb fails with ENOMEM, which says
 * nothing of why: a non-root subscriber with an 8 MiB ring fails at its
 * first ibv_reg_mr under the usual 8 MiB default, and a publisher runs out
 * after a handful of subscribers.  Each registration is charged on its own,
 * even of pages already registered.
 *
 * So a transport adds up what a set-up will pin before it makes anything,
 * with the estimates below, and asks tb_memlock_fits(): the answer is yes,
 * or an error that says how much is needed, how much the limit allows and
 * how much is pinned already, and what to change (`ulimit -l`,
 * `LimitMEMLOCK=` in a systemd unit, limits.conf, or CAP_IPC_LOCK).
 *
 * The estimates follow mlx5, the provider with the largest rings among the
 * common ones (a WQE of 64-byte basic blocks, queues rounded up to powers
 * of two, 64-byte CQEs, a doorbell page per queue); on other providers
 * they are an upper bound.  Memory that tb_mem_alloc() mlock()s is charged
 * to locked_vm, a separate counter under the same limit: see mem.h.
 *
 * Threads: any.  Errors: set-up convention (error.h).
 */
#ifndef TB_MEMLOCK_H
#define TB_MEMLOCK_H

#include <stddef.h>
#include <stdint.h>

#define TB_MEMLOCK_UNLIMITED UINT64_MAX

/* What the process may pin, and has. */
typedef struct tb_memlock_state {
	uint64_t limit;     /* RLIMIT_MEMLOCK (soft), bytes; UNLIMITED */
	uint64_t pinned;    /* pinned already (VmPin in /proc/self/status) */
	int cap_ipc_lock;   /* 1: CAP_IPC_LOCK is effective, no limit applies */
} tb_memlock_state_t;

/* Reads the process's state.  0, or TB_ESYS with a message (getrlimit). */
int tb_memlock_read(tb_memlock_state_t *st);

/*
 * 0 when `need` more bytes can be pinned under `st`, else TB_ENOMEM with a
 * message that starts with `what` (e.g. "stream 'book': an rc subscriber
 * (ring 8 MiB, queues 420 KiB)") and ends with what to change.
 */
int tb_memlock_fits(const tb_memlock_state_t *st, uint64_t need,
		    const char *what);

/* tb_memlock_read, then tb_memlock_fits. */
int tb_memlock_check(uint64_t need, const char *what);

/* How many more blocks of `each` bytes fit under `st` (UINT64_MAX when no
 * limit applies). */
uint64_t tb_memlock_room_for(const tb_memlock_state_t *st, uint64_t each);

/* ------------------------------------------------------------- estimates */

/* A memory region of `len` bytes at `addr`: the pages it spans. */
uint64_t tb_memlock_mr_bytes(const void *addr, size_t len);

/* A completion queue of at least `cqe` entries. */
uint64_t tb_memlock_cq_bytes(uint32_t cqe);

/*
 * A queue pair created with only its send operations (verbs.h): `send_wr`
 * WQEs of `inline_bytes` inline or `send_sge` gather entries, after a
 * `overhead`-byte operation header (TB_MEMLOCK_WQE_RC_WRITE or
 * TB_MEMLOCK_WQE_UD_SEND), and `recv_wr` receives of one scatter entry.
 */
#define TB_MEMLOCK_WQE_RC_WRITE 32u  /* control + remote address segments */
#define TB_MEMLOCK_WQE_UD_SEND 64u   /* control + datagram segments */
uint64_t tb_memlock_qp_bytes(uint32_t overhead, uint32_t send_wr,
			     uint32_t inline_bytes, uint32_t send_sge,
			     uint32_t recv_wr);

/* `v` bytes as text, "8.0 MiB" style, into buf. */
const char *tb_memlock_fmt(uint64_t v, char *buf, size_t len);

#endif
