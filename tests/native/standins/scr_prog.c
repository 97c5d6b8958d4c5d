/* Calls SCR as an application does, writing each routed file (sizes in bytes). */
#include <errno.h>
#include <string.h>

#include "standins.h"

static void write_file(const char *path, size_t bytes) {
    FILE *f = fopen(path, "wb");
    size_t i;
    if (f == NULL) return;
    for (i = 0; i < bytes; ++i) fputc((int)(i & 0x7f), f);
    fclose(f);
}

static void route_and_write(const char *name, size_t bytes) {
    char file[SCR_MAX_FILENAME] = "";
    CALL(SCR_Route_file(name, file));
    write_file(file, bytes);
}

int main(int argc, char **argv) {
    char name[SCR_MAX_FILENAME] = "";
    int flag = 0;
    PROG_INIT(argc, argv);
    CALL(SCR_Init());
    CALL(SCR_Start_output("ckpt.1", SCR_FLAG_CHECKPOINT));
    route_and_write("rank0.dat", 5000);
    CALL(SCR_Complete_output(1));
    CALL(SCR_Start_checkpoint());
    route_and_write("rank0.dat", 3000);
    route_and_write("rank0.dat", 3000);
    CALL(SCR_Complete_checkpoint(1));
    CALL(SCR_Start_output("out.3", SCR_FLAG_OUTPUT));
    route_and_write("viz.dat", 700);
    CALL(SCR_Complete_output(0));
    CALL(SCR_Start_output("bad.4", SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT));
    CALL(SCR_Start_output("ckpt.5", SCR_FLAG_CHECKPOINT));
    CALL(SCR_Start_output("bad.6", SCR_FLAG_CHECKPOINT)); /* refused while ckpt.5 is open */
    route_and_write("rank0.dat", 900);
    CALL(SCR_Complete_output(1));
    STANDIN_STAGGER_BEGIN(); /* the ranks' restarts one after the other, when asked */
    CALL(SCR_Have_restart(&flag, name));
    CALL(SCR_Start_restart(name));
    printf("restart %s %d\n", name, flag);
    CALL(SCR_Route_file("rank0.dat", name)); /* read back: not written */
    CALL(SCR_Complete_restart(1));
    STANDIN_STAGGER_END();
    CALL(SCR_Finalize());
    PROG_END();
    return 0;
}
