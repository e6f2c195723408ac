/*
 * mem.h - memory for rings and buffers: NUMA placement, huge pages, locked
 * and pre-faulted, so that the hot path never takes a page fault or a TLB
 * miss it could have avoided.
 *
 * Page sizes are tried in order 2 MiB hugetlb -> transparent huge pages
 * (madvise) -> 4 KiB; the one obtained is logged (TICKBUS_VERBOSE=1) and
 * recorded in tb_mem_t.page_kind so that tools can report it.
 *
 * Threads: set-up calls, any thread.  Memory is placed on the NUMA node of
 * the core that will poll it: call after tb_thread_pin(), or pass the node
 * (tb_mem_node_of_core()).
 */
#ifndef TB_MEM_H
#define TB_MEM_H

#include <tickbus/tickbus.h>

#include <stddef.h>
#include <sys/types.h>

typedef enum tb_page_kind {
	TB_PAGE_4K = 0,      /* normal pages */
	TB_PAGE_THP = 1,     /* transparent huge pages requested (madvise) */
	TB_PAGE_HUGE_2M = 2, /* hugetlb 2 MiB pages, guaranteed */
} tb_page_kind_t;

/* Flags for tb_mem_alloc and tb_mem_map_shared. */
#define TB_MEM_NO_HUGETLB 0x1u /* skip MAP_HUGETLB / hugetlbfs */
#define TB_MEM_NO_THP     0x2u /* skip madvise(MADV_HUGEPAGE) */
#define TB_MEM_NO_MLOCK   0x4u /* do not mlock */
#define TB_MEM_READONLY   0x8u /* tb_mem_map_shared, create == 0: map read-only */
#define TB_MEM_FLAGS_ALL  0xfu

#define TB_MEM_HUGE_SIZE ((size_t)2 << 20)

/* Where $TICKBUS_HUGETLBFS_DIR is unset, a hugetlbfs mount is looked up in
 * /proc/mounts; set it to a directory to choose one, or to "" for none. */
#define TB_MEM_HUGETLBFS_ENV "TICKBUS_HUGETLBFS_DIR"

typedef struct tb_mem {
	void *addr;                /* page-aligned; 2 MiB-aligned unless 4K */
	size_t size;               /* request rounded up to the page size */
	tb_page_kind_t page_kind;
	int numa_node;             /* node of the first page; -1 unknown */
	int locked;                /* 1 when mlock succeeded */
	int shared;                /* 1 for tb_mem_map_shared */
	char path[TB_PATH_MAX];    /* shared: the file actually mapped */
} tb_mem_t;

/*
 * Allocates `size` bytes of private, zeroed memory on `numa_node` (-1: the
 * node of the CPU this thread runs on), locked and pre-faulted.  Returns 0,
 * or TB_EINVAL (bad size, node or flags) / TB_ENOMEM with a message.  An
 * mlock failure is only a warning (m->locked stays 0).
 */
int tb_mem_alloc(tb_mem_t *m, size_t size, int numa_node, unsigned flags);

/* The mode of a file tb_mem_map_shared creates: its creator's alone. */
#define TB_MEM_SHARED_MODE 0600

/*
 * Maps the shared-memory file `path` (normally under /dev/shm).
 *  create != 0: creates the file, new (O_EXCL | O_NOFOLLOW: an existing
 *    file or link at the path is TB_EBUSY, never reused or followed), of
 *    `size` rounded up to its page size, mode TB_MEM_SHARED_MODE; the
 *    content is zero.  When a hugetlbfs mount exists, the file goes there
 *    under the basename of `path` (2 MiB pages), else at `path` itself.
 *    Placement follows `numa_node` as for tb_mem_alloc.
 *  create == 0: maps an existing regular file (O_NOFOLLOW | O_NONBLOCK: a
 *    link or a FIFO is refused, never waited on), looked for first on the
 *    hugetlbfs mount, then at `path`; `size` 0 means the whole file, else
 *    at most the file's size.  TB_MEM_READONLY maps it read-only.
 *    Placement is the creator's; `numa_node` is ignored.
 * m->path says which file was mapped.  Returns 0 or TB_EINVAL / TB_ENOENT /
 * TB_EBUSY / TB_ESYS with a message.
 */
int tb_mem_map_shared(tb_mem_t *m, const char *path, size_t size, int create,
		      int numa_node, unsigned flags);

/* tb_mem_map_shared(create != 0) with the file's mode, exactly whatever the
 * umask (at most 0777), and its group ((gid_t)-1: the creator's). */
int tb_mem_create_shared(tb_mem_t *m, const char *path, size_t size,
			 int numa_node, unsigned flags, mode_t mode, gid_t group);

/* Unmaps memory from either call and zeroes *m; never removes a file.
 * Safe on a zeroed or already freed tb_mem_t. */
void tb_mem_free(tb_mem_t *m);

/* Removes the file tb_mem_map_shared(path, create=1) made, wherever it put
 * it.  Returns 0, or TB_ENOENT when there was none. */
int tb_mem_unlink_shared(const char *path);

/* Where the shared file `path` lives: on the hugetlbfs mount when one holds
 * a file of that basename, else `path` itself.  Returns 0 or TB_EINVAL. */
int tb_mem_shared_locate(const char *path, char *out, size_t len);

/* NUMA node of `core`, or -1 when unknown (no NUMA support, bad core). */
int tb_mem_node_of_core(int core);

/* "2M-hugetlb", "thp" or "4k". */
const char *tb_mem_page_kind_name(tb_page_kind_t kind);

#endif
