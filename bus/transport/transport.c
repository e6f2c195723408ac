/*
 * transport.c - maps a configured transport to its implementation.
 */
#include "bus/transport/transport.h"

#include "bus/config.h"
#include "bus/error.h"

#include <stddef.h>

static const struct {
	const tb_tx_ops_t *tx;
	const tb_rx_ops_t *rx;
} table[] = {
	[TB_TRANSPORT_SHM] = {&tb_shm_tx_ops, &tb_shm_rx_ops},
	[TB_TRANSPORT_RC] = {&tb_rc_tx_ops, &tb_rc_rx_ops},
	[TB_TRANSPORT_UD] = {&tb_ud_tx_ops, &tb_ud_rx_ops},
	[TB_TRANSPORT_UDP] = {&tb_udp_tx_ops, &tb_udp_rx_ops},
};

static int known(tb_transport_t t)
{
	return (unsigned)t < sizeof(table) / sizeof(table[0]) && table[t].tx;
}

const tb_tx_ops_t *tb_tx_ops_for(tb_transport_t t)
{
	if (known(t))
		return table[t].tx;
	tb_error_set(TB_ENOTSUP, "transport '%s' is not in this build",
		   tb_config_transport_name(t));
	return NULL;
}

const tb_rx_ops_t *tb_rx_ops_for(tb_transport_t t)
{
	if (known(t))
		return table[t].rx;
	tb_error_set(TB_ENOTSUP, "transport '%s' is not in this build",
		   tb_config_transport_name(t));
	return NULL;
}
