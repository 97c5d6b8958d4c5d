/* One run of an SCR application: settings given as arguments (SCR_Config "KEY=VALUE" before
 * SCR_Init), a restart when SCR has one (the file read back), N checkpoints of 1000*i bytes
 * ("n=N", default 3), SCR_Finalize. Every call printed with its result and errno. */
#include <errno.h>
#include <string.h>

#include "standins.h"

const char *SCR_Config(const char *config);

int main(int argc, char **argv) {
    char name[SCR_MAX_FILENAME] = "", file[SCR_MAX_FILENAME] = "";
    int flag = 0, n = 3, i;
    PROG_INIT(argc, argv);
    for (i = 1; i < argc; ++i) {
        if (strncmp(argv[i], "n=", 2) == 0) n = atoi(argv[i] + 2);
        else CALL(SCR_Config(argv[i]) == NULL);
    }
    CALL(SCR_Init());
    CALL(SCR_Have_restart(&flag, name));
    if (flag) {
        CALL(SCR_Start_restart(name));
        CALL(SCR_Route_file("rank0.dat", file));
        printf("restart %s\n", name);
        CALL(SCR_Complete_restart(1));
    }
    for (i = 1; i <= n; ++i) {
        FILE *f;
        int k;
        snprintf(name, sizeof name, "ckpt.%d", i);
        CALL(SCR_Start_output(name, SCR_FLAG_CHECKPOINT));
        CALL(SCR_Route_file("rank0.dat", file));
        f = fopen(file, "wb");
        for (k = 0; f != NULL && k < 1000 * i; ++k) fputc('x', f);
        if (f != NULL) fclose(f);
        CALL(SCR_Complete_output(1));
    }
    CALL(SCR_Finalize());
    PROG_END();
    return 0;
}
