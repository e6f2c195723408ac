/* softrdma-ctl: port down/up, GID changes and fatal QPs on a softrdma
 * fabric, from the outside (see tools/softrdma/ctl.c). */
int softrdma_ctl(int argc, char **argv);

int main(int argc, char **argv)
{
	return softrdma_ctl(argc, argv);
}
