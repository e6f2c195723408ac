// Compiles the public headers as C++: a C++ strategy includes them as is.
#include <tickbus/hist.h>
#include <tickbus/hop.h>
#include <tickbus/tickbus.h>

static void on_msg(void *, const tb_msg_t *) {}

int tb_cxx_header_check()
{
	tb_handler_t h = on_msg;
	return h != nullptr && tb_strerror(TB_LAPPED) != nullptr;
}
