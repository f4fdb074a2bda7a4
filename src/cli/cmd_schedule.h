/* cli/cmd_schedule.h: the `baton schedule` subcommand, which builds a schedule and prints its grid,
 * its simulated bubble for unit costs and the activation slots each stage needs. */
#ifndef BT_CLI_CMD_SCHEDULE_H
#define BT_CLI_CMD_SCHEDULE_H

/* argv[0] is the subcommand's name ("schedule"). Returns the process exit code: 0 on success
 * (and for --help), 1 when the schedule fails validation or the library fails, 2 on bad usage. */
int bt_cmd_schedule(int argc, char **argv);

#endif
