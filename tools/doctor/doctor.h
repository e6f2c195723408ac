/*
 * doctor.h - what tb-doctor's checks share: the host they look at, the
 * streams they judge it against, and the verdicts they hand in.
 *
 * Every check reads the host through tb_doctor_read() and friends, which
 * prefix each path with the root given by --root ("" = the real system),
 * and takes command output (the firewall ruleset, DCB state) through
 * tb_doctor_cmd(), which under --root reads ROOT/cmd/<name> instead of
 * running the command.  So a test can hand tb-doctor a fake /sys, /proc,
 * /dev and command outputs and drive every check to every verdict; only
 * the verbs check (rdma.verbs) looks at the live library, whichever one is
 * loaded (rdma-core's or softrdma).
 *
 * A check reports once per subject (a device port, a core, a netdev) with
 * tb_doctor_report(): a verdict, what it saw, and for anything but "ok"
 * the command or setting that fixes it (for "skipped", why).
 *
 * Check groups, in the order of the README's "Deploying on a trading
 * host" and of the report:
 *   rdma.c   kernel modules, device nodes, ports, GIDs, RoCE mode, P_Keys
 *   verbs.c  devices and ports through libibverbs; softrdma recognised
 *   net.c    MTU, PFC/ECN, firewall, rp_filter, IGMP, socket buffers
 *   mem.c    memlock, hugepages, CAP_IPC_LOCK
 *   cpu.c    isolation, IRQ affinity, governor, THP, NUMA
 *   time.c   invariant TSC, clocksource
 * and, apart, audit.c: --audit, the memory registrations of running
 * processes against what their role needs.
 */
#ifndef TB_DOCTOR_H
#define TB_DOCTOR_H

#include <tickbus/tickbus.h>

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tb_doctor_verdict {
	TB_DOCTOR_OK = 0,
	TB_DOCTOR_WARN = 1,
	TB_DOCTOR_FAIL = 2,
	TB_DOCTOR_SKIPPED = 3,
} tb_doctor_verdict_t;

#define TB_DOCTOR_RESULTS_MAX 256
#define TB_DOCTOR_TEXT 768
#define TB_DOCTOR_NDEVS_MAX 16

typedef struct tb_doctor_result {
	char id[48];             /* "rdma.modules", "cpu.isolated" */
	char subject[64];        /* "mlx5_0/1", "cpu 3", "" */
	tb_doctor_verdict_t verdict;
	char saw[TB_DOCTOR_TEXT];
	char fix[TB_DOCTOR_TEXT]; /* the fix, or why it was skipped */
} tb_doctor_result_t;

/* An RDMA port found under /sys/class/infiniband. */
typedef struct tb_doctor_port {
	char dev[64];
	int port;
	char ndev[64];           /* its netdev (RoCE), "" for InfiniBand */
	int ethernet;            /* link layer Ethernet (RoCE) */
} tb_doctor_port_t;

typedef struct tb_doctor {
	char root[TB_PATH_MAX];  /* "" = the real system */
	tb_config_t *cfg;        /* NULL: no -c FILE */
	int n_streams;
	const tb_stream_cfg_t *streams[64];
	int needs_rdma;          /* 1: an rc or ud stream; 0: none; -1: no
				    config, so unknown */
	int verbs;               /* run the verbs check */
	int softrdma;            /* libibverbs is softrdma (probed first):
				    no kernel RDMA stack is needed */
	uint32_t peer_mtu;       /* --peer-mtu, 0 = none */
	int n_ports;
	tb_doctor_port_t ports[TB_DOCTOR_NDEVS_MAX];
	int n_results;
	tb_doctor_result_t results[TB_DOCTOR_RESULTS_MAX];
} tb_doctor_t;

/* Hands in one verdict; `fix` may be NULL for "ok".  printf-style `saw`. */
void tb_doctor_report(tb_doctor_t *d, const char *id, const char *subject,
		      tb_doctor_verdict_t v, const char *fix,
		      const char *saw_fmt, ...)
	__attribute__((format(printf, 6, 7)));

/* Reads ROOT`path` whole into `buf` (NUL-ended, trailing blanks cut).
 * Returns its length, or -1 (absent, unreadable). */
int tb_doctor_read(const tb_doctor_t *d, const char *path, char *buf,
		   size_t len);

/* Reads ROOT`path` as one integer (decimal, or 0x hex); 0 or -1. */
int tb_doctor_read_long(const tb_doctor_t *d, const char *path, long *v);

/* 1 if ROOT`path` exists. */
int tb_doctor_exists(const tb_doctor_t *d, const char *path);

/* opendir(ROOT`path`), or NULL. */
DIR *tb_doctor_opendir(const tb_doctor_t *d, const char *path);

/* The output of `cmd` (run by sh, stderr dropped), or under --root the
 * file ROOT/cmd/`name`.  Returns its length, or -1 when the command could
 * not run or printed nothing (the file is absent). */
int tb_doctor_cmd(const tb_doctor_t *d, const char *name, const char *cmd,
		  char *buf, size_t len);

/* Parses a cpu list "0-3,8" into `set` (bits 0..1023); 0 or -1. */
int tb_doctor_cpulist(const char *s, uint64_t set[16]);

/* The cores the configured streams pin to, as a set; the count. */
int tb_doctor_stream_cores(const tb_doctor_t *d, uint64_t set[16]);

/* "3,5-7" of a set, into buf. */
const char *tb_doctor_cpulist_str(const uint64_t set[16], char *buf,
				  size_t len);

/* Check groups (one file each). */
void tb_doctor_check_rdma(tb_doctor_t *d);
void tb_doctor_check_verbs(tb_doctor_t *d);
/* 1 if the loaded libibverbs is softrdma (its device "softrdma0"). */
int tb_doctor_verbs_is_softrdma(void);
void tb_doctor_check_net(tb_doctor_t *d);
void tb_doctor_check_mem(tb_doctor_t *d);
void tb_doctor_check_cpu(tb_doctor_t *d);
void tb_doctor_check_time(tb_doctor_t *d);

/* --audit: lists the memory registrations of every running process in the
 * counters directory `dir` (NULL: the default) and judges each; prints as
 * text or JSON.  Returns 0 (nothing flagged), 1 (something flagged) or -1
 * (the directory could not be read; tb_errmsg says why). */
int tb_doctor_audit(const char *dir, int json);

/* The verdict's word: "ok", "warn", "fail", "skipped". */
const char *tb_doctor_verdict_name(tb_doctor_verdict_t v);

#endif
