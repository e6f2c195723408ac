/*
 * gateway_proto.h - the former name of gw.h, the order gateway's wire
 * format (prefix tb_gw_).  Include "tools/md/gw.h"; this name stays only
 * while tests/scenario/test_feed_scenario.c still includes it.
 */
#include "tools/md/gw.h"
