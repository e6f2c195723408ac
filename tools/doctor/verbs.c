/*
 * verbs.c - devices and ports as libibverbs sees them: what tickbus's rc
 * and ud transports will open.  This check reads the live library, not the
 * --root tree, so it tells apart rdma-core on a host without RDMA (no
 * device: here is how to use softrdma), softrdma (the software device:
 * fine for tests, not a network), and a real NIC (each port's state, link
 * layer, active MTU and speed).
 */
#include "tools/doctor/doctor.h"

#include <infiniband/verbs.h>

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static const char softrdma_hint[] =
	"no RDMA device: to run rc and ud on this host anyway, use tickbus's "
	"software device: tb-softrdma CMD... (installed by make install), or "
	"LD_LIBRARY_PATH=build/softrdma SOFTRDMA_FABRIC=NAME CMD... from the "
	"build tree";

static int mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0;
}

static double speed_gbps(const struct ibv_port_attr *a)
{
	static const struct { int bit; double gbps; } sp[] = {
		{1, 2.5}, {2, 5}, {4, 10}, {8, 10}, {16, 14}, {32, 25},
		{64, 50}, {128, 100}, {256, 200}};
	int width = a->active_width == 1 ? 1 : a->active_width == 2 ? 4
		  : a->active_width == 4 ? 8 : a->active_width == 8 ? 12
		  : a->active_width == 16 ? 2 : 0;

	for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++)
		if (a->active_speed == sp[i].bit)
			return sp[i].gbps * width;
	return 0;
}

int tb_doctor_verbs_is_softrdma(void)
{
	struct ibv_device **list;
	int n = 0, soft = 0;

	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n; i++)
		soft |= !strncmp(ibv_get_device_name(list[i]), "softrdma", 8);
	if (list)
		ibv_free_device_list(list);
	return soft;
}

void tb_doctor_check_verbs(tb_doctor_t *d)
{
	struct ibv_device **list;
	int n = 0;

	if (!d->verbs) {
		tb_doctor_report(d, "rdma.verbs", "", TB_DOCTOR_SKIPPED,
				 "run without --no-verbs",
				 "--no-verbs: the library was not asked");
		return;
	}
	errno = 0;
	list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		int err = errno;

		tb_doctor_report(d, "rdma.verbs", "",
				 d->needs_rdma > 0 ? TB_DOCTOR_FAIL
				 : d->needs_rdma < 0 ? TB_DOCTOR_WARN
						     : TB_DOCTOR_SKIPPED,
				 softrdma_hint,
				 "libibverbs lists no RDMA device%s%s",
				 err ? ": " : "", err ? strerror(err) : "");
		if (list)
			ibv_free_device_list(list);
		return;
	}
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);
		int soft = !strncmp(name, "softrdma", 8);
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;

		if (!ctx || ibv_query_device(ctx, &da) != 0) {
			tb_doctor_report(d, "rdma.verbs", name, TB_DOCTOR_FAIL,
					 "check permissions on /dev/infiniband "
					 "(udev rule: MODE=\"0666\" or the "
					 "rdma group)",
					 "cannot open %s: %s", name,
					 strerror(errno));
			if (ctx)
				ibv_close_device(ctx);
			continue;
		}
		for (int p = 1; p <= da.phys_port_cnt; p++) {
			struct ibv_port_attr pa;
			char subj[96], what[256];

			snprintf(subj, sizeof(subj), "%s/%d", name, p);
			if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0) {
				tb_doctor_report(d, "rdma.verbs", subj,
						 TB_DOCTOR_FAIL, "check the "
						 "driver's messages (dmesg)",
						 "ibv_query_port failed");
				continue;
			}
			snprintf(what, sizeof(what), "%s, %s, active MTU %d, "
				 "%.0f Gb/s, %d GIDs", ibv_port_state_str(pa.state),
				 pa.link_layer == IBV_LINK_LAYER_ETHERNET
					 ? "Ethernet (RoCE)" : "InfiniBand",
				 mtu_bytes(pa.active_mtu), speed_gbps(&pa),
				 pa.gid_tbl_len);
			if (soft)
				tb_doctor_report(d, "rdma.verbs", subj,
						 TB_DOCTOR_WARN,
						 "softrdma is tickbus's software "
						 "RDMA device, for tests on one "
						 "host: unset LD_LIBRARY_PATH "
						 "(or do not use tb-softrdma) to "
						 "reach a real NIC",
						 "%s is softrdma, the software "
						 "device (SOFTRDMA_FABRIC=%s): %s",
						 name,
						 getenv("SOFTRDMA_FABRIC")
							 ? getenv("SOFTRDMA_FABRIC")
							 : "(unset)", what);
			else if (pa.state != IBV_PORT_ACTIVE)
				tb_doctor_report(d, "rdma.verbs", subj,
						 TB_DOCTOR_FAIL,
						 "bring the port up: cable, "
						 "switch port, ip link set dev "
						 "NETDEV up",
						 "%s", what);
			else
				tb_doctor_report(d, "rdma.verbs", subj,
						 TB_DOCTOR_OK, NULL, "%s", what);
		}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
}
