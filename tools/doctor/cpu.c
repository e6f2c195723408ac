/*
 * cpu.c - the cores the streams pin to: isolated from the scheduler
 * (isolcpus) and from the tick (nohz_full), free of the NIC's interrupts,
 * at full frequency (the governor), on the NIC's NUMA node; and
 * transparent hugepages, whose compaction stalls show up as latency.
 */
#include "tools/doctor/doctor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int in_set(const uint64_t s[16], int c)
{
	return c >= 0 && c < 1024 && (s[c / 64] >> (c % 64)) & 1;
}

/* The cores of `want` missing from the cpu list file `path`, as text. */
static int missing_from(const tb_doctor_t *d, const char *path,
			const uint64_t want[16], char *out, size_t len)
{
	char buf[1024] = "";
	uint64_t have[16], miss[16];
	int n = 0;

	tb_doctor_read(d, path, buf, sizeof(buf));
	if (tb_doctor_cpulist(buf, have) != 0)
		memset(have, 0, sizeof(have));
	for (int i = 0; i < 16; i++) {
		miss[i] = want[i] & ~have[i];
		n += __builtin_popcountll(miss[i]);
	}
	tb_doctor_cpulist_str(miss, out, len);
	return n;
}

static void isolation(tb_doctor_t *d, const uint64_t cores[16],
		      const char *list)
{
	char miss_iso[256], miss_nohz[256], fix[1024];
	int a = missing_from(d, "/sys/devices/system/cpu/isolated", cores,
			     miss_iso, sizeof(miss_iso));
	int b = missing_from(d, "/sys/devices/system/cpu/nohz_full", cores,
			     miss_nohz, sizeof(miss_nohz));

	snprintf(fix, sizeof(fix), "add isolcpus=%s nohz_full=%s "
		 "rcu_nocbs=%s to the kernel command line (GRUB_CMDLINE_LINUX "
		 "in /etc/default/grub; update-grub; reboot)", list, list, list);
	if (a || b)
		tb_doctor_report(d, "cpu.isolated", list, TB_DOCTOR_WARN, fix,
				 "not isolated: %s; tick not stopped: %s (the "
				 "scheduler and the timer tick interrupt the "
				 "hot threads)", a ? miss_iso : "-",
				 b ? miss_nohz : "-");
	else
		tb_doctor_report(d, "cpu.isolated", list, TB_DOCTOR_OK, NULL,
				 "cores %s isolated and tickless", list);
}

/* The NIC's IRQs: lines of /proc/interrupts naming an RDMA device or
 * its netdev. */
static void irqs(tb_doctor_t *d, const uint64_t cores[16], const char *list)
{
	static char intr[1 << 17];
	char hits[512] = "", fix[512];
	int nic_irqs = 0;

	if (tb_doctor_read(d, "/proc/interrupts", intr, sizeof(intr)) < 0) {
		tb_doctor_report(d, "cpu.irq", list, TB_DOCTOR_SKIPPED,
				 "mount /proc", "cannot read /proc/interrupts");
		return;
	}
	for (char *line = intr; line && *line;) {
		char *nl = strchr(line, '\n'), path[64], aff[1024];
		uint64_t set[16];
		int irq, nic = 0;

		if (nl)
			*nl = '\0';
		irq = atoi(line);
		for (int i = 0; i < d->n_ports && irq > 0; i++)
			nic |= strstr(line, d->ports[i].dev) ||
			       (d->ports[i].ndev[0] &&
				strstr(line, d->ports[i].ndev)) ||
			       strstr(line, "mlx5_comp");
		if (nic) {
			nic_irqs++;
			snprintf(path, sizeof(path),
				 "/proc/irq/%d/smp_affinity_list", irq);
			if (tb_doctor_read(d, path, aff, sizeof(aff)) > 0 &&
			    tb_doctor_cpulist(aff, set) == 0)
				for (int c = 0; c < 1024; c++)
					if (in_set(set, c) && in_set(cores, c) &&
					    strlen(hits) < sizeof(hits) - 32) {
						snprintf(hits + strlen(hits),
							 sizeof(hits) - strlen(hits),
							 "%sirq %d on cpu %d",
							 hits[0] ? ", " : "",
							 irq, c);
						break;
					}
		}
		line = nl ? nl + 1 : NULL;
	}
	snprintf(fix, sizeof(fix), "move them off: echo OTHER_CPUS > "
		 "/proc/irq/N/smp_affinity_list for each, and keep irqbalance "
		 "away (IRQBALANCE_BANNED_CPULIST=%s in /etc/default/irqbalance)",
		 list);
	if (hits[0])
		tb_doctor_report(d, "cpu.irq", list, TB_DOCTOR_WARN, fix,
				 "the NIC's interrupts land on the streams' "
				 "cores: %s", hits);
	else if (!nic_irqs)
		tb_doctor_report(d, "cpu.irq", list, TB_DOCTOR_SKIPPED,
				 "no RDMA NIC found, or its IRQs are not named "
				 "after it", "no NIC interrupt in "
				 "/proc/interrupts");
	else
		tb_doctor_report(d, "cpu.irq", list, TB_DOCTOR_OK, NULL,
				 "%d NIC interrupts, none on cores %s",
				 nic_irqs, list);
}

static void governor(tb_doctor_t *d, const uint64_t cores[16])
{
	int any = 0;

	for (int c = 0; c < 1024; c++) {
		char path[128], gov[64], subj[32], fix[256];

		if (!in_set(cores, c))
			continue;
		any = 1;
		snprintf(subj, sizeof(subj), "cpu%d", c);
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/"
			 "cpufreq/scaling_governor", c);
		if (tb_doctor_read(d, path, gov, sizeof(gov)) < 0) {
			tb_doctor_report(d, "cpu.governor", subj,
					 TB_DOCTOR_SKIPPED, "set the BIOS to "
					 "maximum performance (no OS control)",
					 "no cpufreq: the firmware or the "
					 "hypervisor sets the frequency");
			continue;
		}
		snprintf(fix, sizeof(fix), "cpupower -c %d frequency-set -g "
			 "performance (tuned-adm profile latency-performance)",
			 c);
		if (strcmp(gov, "performance"))
			tb_doctor_report(d, "cpu.governor", subj,
					 TB_DOCTOR_WARN, fix, "governor %s: the "
					 "core slows down between bursts", gov);
		else
			tb_doctor_report(d, "cpu.governor", subj,
					 TB_DOCTOR_OK, NULL, "governor "
					 "performance");
	}
	if (!any)
		tb_doctor_report(d, "cpu.governor", "", TB_DOCTOR_SKIPPED,
				 "pin streams (publisher_core, subscriber_core)",
				 "no configured core");
}

static void thp(tb_doctor_t *d)
{
	char v[128], defrag[128] = "";

	if (tb_doctor_read(d, "/sys/kernel/mm/transparent_hugepage/enabled",
			   v, sizeof(v)) < 0) {
		tb_doctor_report(d, "cpu.thp", "", TB_DOCTOR_SKIPPED,
				 "the kernel has no THP", "no "
				 "/sys/kernel/mm/transparent_hugepage");
		return;
	}
	tb_doctor_read(d, "/sys/kernel/mm/transparent_hugepage/defrag", defrag,
		       sizeof(defrag));
	if (strstr(v, "[always]") && !strstr(defrag, "[never]") &&
	    !strstr(defrag, "[defer]") && !strstr(defrag, "[madvise]"))
		tb_doctor_report(d, "cpu.thp", "", TB_DOCTOR_WARN,
				 "echo madvise > /sys/kernel/mm/"
				 "transparent_hugepage/enabled; echo defer > "
				 "/sys/kernel/mm/transparent_hugepage/defrag "
				 "(or transparent_hugepage=madvise on the "
				 "kernel command line)",
				 "THP %s, defrag %s: page faults may stall in "
				 "compaction", v, defrag[0] ? defrag : "?");
	else
		tb_doctor_report(d, "cpu.thp", "", TB_DOCTOR_OK, NULL,
				 "THP %s, defrag %s", v, defrag[0] ? defrag : "?");
}

static void numa(tb_doctor_t *d, const uint64_t cores[16], const char *list)
{
	int any = 0;

	if (!list[0]) {
		tb_doctor_report(d, "cpu.numa", "", TB_DOCTOR_SKIPPED,
				 "pin the hot threads (publisher_core, "
				 "subscriber_core)", "no configured core to "
				 "place against the NIC");
		return;
	}

	for (int i = 0; i < d->n_ports; i++) {
		char path[256], subj[96], bad[256] = "", fix[512];
		long node = -1;

		snprintf(subj, sizeof(subj), "%s", d->ports[i].dev);
		if (i > 0 && !strcmp(d->ports[i - 1].dev, d->ports[i].dev))
			continue;
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/"
			 "numa_node", d->ports[i].dev);
		if (tb_doctor_read_long(d, path, &node) != 0 || node < 0) {
			tb_doctor_report(d, "cpu.numa", subj, TB_DOCTOR_SKIPPED,
					 "one NUMA node, or the firmware does "
					 "not say", "the NIC's NUMA node is "
					 "unknown (%ld)", node);
			any = 1;
			continue;
		}
		any = 1;
		for (int c = 0; c < 1024; c++) {
			char np[128];

			if (!in_set(cores, c))
				continue;
			snprintf(np, sizeof(np), "/sys/devices/system/cpu/cpu%d/"
				 "node%ld", c, node);
			if (!tb_doctor_exists(d, np) &&
			    strlen(bad) < sizeof(bad) - 8)
				snprintf(bad + strlen(bad),
					 sizeof(bad) - strlen(bad), "%s%d",
					 bad[0] ? "," : "", c);
		}
		snprintf(fix, sizeof(fix), "pin the streams to cores of node "
			 "%ld (lscpu -e; publisher_core, subscriber_core), so "
			 "that rings and the NIC share a memory controller",
			 node);
		if (bad[0])
			tb_doctor_report(d, "cpu.numa", subj, TB_DOCTOR_WARN,
					 fix, "the NIC is on node %ld, cores %s "
					 "are not: every DMA crosses the "
					 "interconnect", node, bad);
		else
			tb_doctor_report(d, "cpu.numa", subj, TB_DOCTOR_OK,
					 NULL, "the NIC and cores %s on node "
					 "%ld", list, node);
	}
	if (!any)
		tb_doctor_report(d, "cpu.numa", "", TB_DOCTOR_SKIPPED,
				 "no RDMA NIC to place", "no RDMA device");
}

void tb_doctor_check_cpu(tb_doctor_t *d)
{
	uint64_t cores[16];
	char list[256];
	int n = tb_doctor_stream_cores(d, cores);

	tb_doctor_cpulist_str(cores, list, sizeof(list));
	if (n == 0) {
		const char *why = d->cfg ? "no stream sets publisher_core or "
					   "subscriber_core"
					 : "no -c FILE: no cores to check";

		tb_doctor_report(d, "cpu.isolated", "", TB_DOCTOR_SKIPPED,
				 "pin the hot threads (publisher_core, "
				 "subscriber_core)", "%s", why);
		tb_doctor_report(d, "cpu.irq", "", TB_DOCTOR_SKIPPED,
				 "pin the hot threads", "%s", why);
	} else {
		isolation(d, cores, list);
		irqs(d, cores, list);
	}
	governor(d, cores);
	thp(d);
	numa(d, cores, list);
}
