/* cli/outputs.h: no output of a command may destroy one of its inputs. A command registers every
 * file it reads (the model, its plugins, the data files its model names, checkpoints, --input,
 * --labels, run files, ...) by device and inode, following symbolic links, then checks every path
 * it will write before anything is opened for writing: an output that is the same file as an input
 * (the same name, a hard link to it, a symbolic link to it) is refused with exit 2 and a message
 * naming both. An output that does not exist yet cannot clash, nor one that is no regular file (a
 * FIFO or device is written through: io/atomic_file.h). Files are compared, never names.
 *
 * A checkpoint directory is an output of its own kind: the run replaces and removes files there
 * (checkpoint*.safetensors*, vocab.txt, auto-layout.txt, conv-paths*.json, .lock), so any of those
 * that is an input is refused, except the files of the checkpoint --resume continues, which the
 * run replaces by design. Used by every command that writes files (run, predict, profile, plot);
 * the others write only to the terminal. */
#ifndef BT_CLI_OUTPUTS_H
#define BT_CLI_OUTPUTS_H

#include <sys/types.h>

#include "cli/cli.h"

typedef struct bt_cli_input {
    char *what;      /* how the command came to read it: "the model file", "--labels", "--resume DIR" */
    char *path;      /* the name it is read under */
    dev_t dev;
    ino_t ino;
    int continued;   /* a file of the checkpoint --resume continues (see above) */
} bt_cli_input;

typedef struct bt_cli_inputs {
    const char *cmd; /* for messages: "baton CMD: ..." */
    bt_cli_input *in;
    int n, cap;
    int nomem;       /* an add ran out of memory: every check then fails */
} bt_cli_inputs;

void bt_cli_inputs_init(bt_cli_inputs *r, const char *cmd);
/* Accepts an initialised or zeroed set. */
void bt_cli_inputs_free(bt_cli_inputs *r);

/* Adds path, read as what, when it is a regular file (following links); a path that does not
 * exist is left to its reader to report, a directory or device has nothing to protect. */
void bt_cli_inputs_add(bt_cli_inputs *r, const char *what, const char *path);
/* The model file and its --plugin libraries. */
void bt_cli_inputs_add_model(bt_cli_inputs *r, const bt_cli_model_opts *mo);
/* The files of a data: source (section: "data.train" or "data.eval"; nothing for none or
 * synthetic). */
void bt_cli_inputs_add_data(bt_cli_inputs *r, const char *section, const bt_data_source *src);
/* A checkpoint argument (option: "--resume", "--init", "--weights"): a directory's latest
 * checkpoint, or the file; an index with the shards it names. continued (--resume): also the
 * records read beside it (auto-layout.txt, conv-paths*.json, vocab.txt), all marked continued. */
void bt_cli_inputs_add_checkpoint(bt_cli_inputs *r, const char *option, const char *path, int continued);

/* BT_EXIT_USAGE, printing "baton CMD: OPTION PATH is the same file as the input INPUT (WHAT): ...",
 * when path is a regular file that is one of the inputs; BT_EXIT_OK otherwise (BT_EXIT_RUNTIME
 * after an add ran out of memory). option: the flag or key that named path ("--log-file", "-o"). */
int bt_cli_outputs_check(const bt_cli_inputs *r, const char *option, const char *path);
/* The same for a checkpoint directory: each file the run may replace or remove there (above)
 * against every input that --resume does not continue. A directory that does not exist yet
 * holds nothing. */
int bt_cli_outputs_check_checkpoint_dir(const bt_cli_inputs *r, const char *option, const char *dir);

#endif
