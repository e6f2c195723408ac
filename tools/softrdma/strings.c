/*
 * Names for enum values, and IB rate conversions.  Pure functions.
 */
#include "softrdma.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

SR_EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const n[] = {
		[IBV_NODE_CA] = "InfiniBand channel adapter",
		[IBV_NODE_SWITCH] = "InfiniBand switch",
		[IBV_NODE_ROUTER] = "InfiniBand router",
		[IBV_NODE_RNIC] = "iWARP NIC",
		[IBV_NODE_USNIC] = "usNIC",
		[IBV_NODE_USNIC_UDP] = "usNIC UDP",
		[IBV_NODE_UNSPECIFIED] = "unspecified",
	};
	if (t < 0 || (size_t)t >= NELEM(n) || !n[t])
		return "unknown";
	return n[t];
}

SR_EXPORT const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const n[] = {
		[IBV_PORT_NOP] = "PORT_NOP",
		[IBV_PORT_DOWN] = "PORT_DOWN",
		[IBV_PORT_INIT] = "PORT_INIT",
		[IBV_PORT_ARMED] = "PORT_ARMED",
		[IBV_PORT_ACTIVE] = "PORT_ACTIVE",
		[IBV_PORT_ACTIVE_DEFER] = "PORT_ACTIVE_DEFER",
	};
	if ((size_t)s >= NELEM(n))
		return "unknown";
	return n[s];
}

SR_EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
	static const char *const n[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error (overrun)",
		[IBV_EVENT_QP_FATAL] = "QP fatal error",
		[IBV_EVENT_QP_REQ_ERR] = "QP invalid request error",
		[IBV_EVENT_QP_ACCESS_ERR] = "QP access violation error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration failed",
		[IBV_EVENT_DEVICE_FATAL] = "device fatal error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID changed",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key table changed",
		[IBV_EVENT_SM_CHANGE] = "subnet manager changed",
		[IBV_EVENT_SRQ_ERR] = "SRQ error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration requested",
		[IBV_EVENT_GID_CHANGE] = "GID table changed",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal error",
	};
	if ((size_t)e >= NELEM(n) || !n[e])
		return "unknown";
	return n[e];
}

SR_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s)
{
	static const char *const n[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "work request flushed",
		[IBV_WC_MW_BIND_ERR] = "memory window bind error",
		[IBV_WC_BAD_RESP_ERR] = "bad response",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retries exhausted",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "receiver-not-ready retries exhausted",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "remote aborted",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "tag matching error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "tag matching rendezvous incomplete",
	};
	if ((size_t)s >= NELEM(n) || !n[s])
		return "unknown";
	return n[s];
}

/* Signalling rate of each enum ibv_rate, in Mb/s (FDR and faster lanes use
 * 64b/66b, hence the odd numbers). */
static const int rate_mbps[] = {
	[IBV_RATE_2_5_GBPS] = 2500,    [IBV_RATE_5_GBPS] = 5000,
	[IBV_RATE_10_GBPS] = 10000,    [IBV_RATE_20_GBPS] = 20000,
	[IBV_RATE_30_GBPS] = 30000,    [IBV_RATE_40_GBPS] = 40000,
	[IBV_RATE_60_GBPS] = 60000,    [IBV_RATE_80_GBPS] = 80000,
	[IBV_RATE_120_GBPS] = 120000,  [IBV_RATE_14_GBPS] = 14062,
	[IBV_RATE_56_GBPS] = 56250,    [IBV_RATE_112_GBPS] = 112500,
	[IBV_RATE_168_GBPS] = 168750,  [IBV_RATE_25_GBPS] = 25781,
	[IBV_RATE_100_GBPS] = 103125,  [IBV_RATE_200_GBPS] = 206250,
	[IBV_RATE_300_GBPS] = 309375,  [IBV_RATE_28_GBPS] = 28125,
	[IBV_RATE_50_GBPS] = 53125,    [IBV_RATE_400_GBPS] = 425000,
	[IBV_RATE_600_GBPS] = 637500,  [IBV_RATE_800_GBPS] = 850000,
	[IBV_RATE_1200_GBPS] = 1275000,
};

/* Multiples of 2.5 Gb/s exist only for the SDR/DDR/QDR generation rates. */
static const int rate_mult[] = {
	[IBV_RATE_2_5_GBPS] = 1,  [IBV_RATE_5_GBPS] = 2,
	[IBV_RATE_10_GBPS] = 4,   [IBV_RATE_20_GBPS] = 8,
	[IBV_RATE_30_GBPS] = 12,  [IBV_RATE_40_GBPS] = 16,
	[IBV_RATE_60_GBPS] = 24,  [IBV_RATE_80_GBPS] = 32,
	[IBV_RATE_120_GBPS] = 48,
};

SR_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
	if ((size_t)rate >= NELEM(rate_mbps) || !rate_mbps[rate])
		return -1;
	return rate_mbps[rate];
}

SR_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t r = 0; r < NELEM(rate_mbps); r++)
		if (rate_mbps[r] && rate_mbps[r] == mbps)
			return (enum ibv_rate)r;
	return IBV_RATE_MAX;
}

SR_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
	if ((size_t)rate >= NELEM(rate_mult) || !rate_mult[rate])
		return -1;
	return rate_mult[rate];
}

SR_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	for (size_t r = 0; r < NELEM(rate_mult); r++)
		if (rate_mult[r] && rate_mult[r] == mult)
			return (enum ibv_rate)r;
	return IBV_RATE_MAX;
}
