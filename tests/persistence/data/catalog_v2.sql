-- A catalog made by agentbox at 4a0c077 (schema version 2; a root server, two sandboxes that ran
-- as uid 65534, one snapshot), dumped with sqlite3 .dump; catalog_test.cpp migrates it.
PRAGMA user_version=2;
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE sandboxes (
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        owner_pid INTEGER NOT NULL DEFAULT 0, restore_snapshot TEXT NOT NULL DEFAULT '', lost_processes TEXT NOT NULL DEFAULT '[]');
INSERT INTO sandboxes VALUES('bf75f0a258ff','active','2026-12-01T13:18:36.863Z','2026-12-01T13:18:37.160Z',0,'','[]');
INSERT INTO sandboxes VALUES('fdce03a18f8a','active','2026-12-01T13:18:36.874Z','2026-12-01T13:18:37.191Z',0,'','[]');
CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        sandbox_id TEXT NOT NULL UNIQUE REFERENCES sandboxes(id) ON DELETE CASCADE,
        created_at TEXT NOT NULL);
INSERT INTO conversations VALUES('idle','bf75f0a258ff','2026-12-01T13:18:36.863Z');
INSERT INTO conversations VALUES('live','fdce03a18f8a','2026-12-01T13:18:36.874Z');
CREATE TABLE sessions (
        sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        cwd TEXT NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (sandbox_id, name));
INSERT INTO sessions VALUES('bf75f0a258ff','default','/workspace',replace('__ab_done () \012{ \012    builtin printf ''%s\0%s\0'' "$1" "$PWD";\012    __ab_save;\012    builtin printf ''s\0''\012}\012__ab_save () \012{ \012    { \012        builtin declare -f;\012        builtin alias -p;\012        builtin umask -p;\012        builtin trap -p;\012        [[ "$BASHOPTS $SHELLOPTS" == "$__ab_opts" ]] || { \012            builtin shopt -p;\012            builtin set +o\012        };\012        local __ab_n __ab_v=();\012        for __ab_n in ${!a@} ${!b@} ${!c@} ${!d@} ${!e@} ${!f@} ${!g@} ${!h@} ${!i@} ${!j@} ${!k@} ${!l@} ${!m@} ${!n@} ${!o@} ${!p@} ${!q@} ${!r@} ${!s@} ${!t@} ${!u@} ${!v@} ${!w@} ${!x@} ${!y@} ${!z@} ${!A@} ${!B@} ${!C@} ${!D@} ${!E@} ${!F@} ${!G@} ${!H@} ${!I@} ${!J@} ${!K@} ${!L@} ${!M@} ${!N@} ${!O@} ${!P@} ${!Q@} ${!R@} ${!S@} ${!T@} ${!U@} ${!V@} ${!W@} ${!X@} ${!Y@} ${!Z@} ${!_@};\012        do\012            case $__ab_n in \012                BASH* | FUNCNAME | PIPESTATUS | _ | SHLVL | RANDOM | SRANDOM | SECONDS | LINENO | HISTCMD | EPOCH* | PPID | UID | EUID | GROUPS)\012\012                ;;\012                SHELLOPTS | DIRSTACK | COMP_* | __ab* | OPTIND | OPTERR | PWD)\012\012                ;;\012                *)\012                    __ab_v+=("$__ab_n")\012                ;;\012            esac;\012        done;\012        (( ${#__ab_v[@]} )) && builtin declare -p "${__ab_v[@]}";\012        builtin printf ''builtin cd -- %q\n'' "$PWD"\012    } > "$__ab_dir/state" 2> /dev/null\012}\012umask 0022\012declare -x HOME="/home/user"\012declare -x HOSTNAME="agentbox"\012declare -- HOSTTYPE="x86_64"\012declare -- IFS=$'' \t\n''\012declare -x LANG="C.UTF-8"\012declare -x LOGNAME="user"\012declare -- MACHTYPE="x86_64-pc-linux-gnu"\012declare -x OLDPWD="/workspace"\012declare -- OSTYPE="linux-gnu"\012declare -x PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\012declare -- PS4="+ "\012declare -x SHELL="/bin/bash"\012declare -x TERM="dumb"\012declare -x TMPDIR="/tmp"\012declare -x USER="user"\012builtin cd -- /workspace\012','\012',char(10)));
INSERT INTO sessions VALUES('fdce03a18f8a','default','/workspace',replace('__ab_done () \012{ \012    builtin printf ''%s\0%s\0'' "$1" "$PWD";\012    __ab_save;\012    builtin printf ''s\0''\012}\012__ab_save () \012{ \012    { \012        builtin declare -f;\012        builtin alias -p;\012        builtin umask -p;\012        builtin trap -p;\012        [[ "$BASHOPTS $SHELLOPTS" == "$__ab_opts" ]] || { \012            builtin shopt -p;\012            builtin set +o\012        };\012        local __ab_n __ab_v=();\012        for __ab_n in ${!a@} ${!b@} ${!c@} ${!d@} ${!e@} ${!f@} ${!g@} ${!h@} ${!i@} ${!j@} ${!k@} ${!l@} ${!m@} ${!n@} ${!o@} ${!p@} ${!q@} ${!r@} ${!s@} ${!t@} ${!u@} ${!v@} ${!w@} ${!x@} ${!y@} ${!z@} ${!A@} ${!B@} ${!C@} ${!D@} ${!E@} ${!F@} ${!G@} ${!H@} ${!I@} ${!J@} ${!K@} ${!L@} ${!M@} ${!N@} ${!O@} ${!P@} ${!Q@} ${!R@} ${!S@} ${!T@} ${!U@} ${!V@} ${!W@} ${!X@} ${!Y@} ${!Z@} ${!_@};\012        do\012            case $__ab_n in \012                BASH* | FUNCNAME | PIPESTATUS | _ | SHLVL | RANDOM | SRANDOM | SECONDS | LINENO | HISTCMD | EPOCH* | PPID | UID | EUID | GROUPS)\012\012                ;;\012                SHELLOPTS | DIRSTACK | COMP_* | __ab* | OPTIND | OPTERR | PWD)\012\012                ;;\012                *)\012                    __ab_v+=("$__ab_n")\012                ;;\012            esac;\012        done;\012        (( ${#__ab_v[@]} )) && builtin declare -p "${__ab_v[@]}";\012        builtin printf ''builtin cd -- %q\n'' "$PWD"\012    } > "$__ab_dir/state" 2> /dev/null\012}\012umask 0022\012declare -x HOME="/home/user"\012declare -x HOSTNAME="agentbox"\012declare -- HOSTTYPE="x86_64"\012declare -- IFS=$'' \t\n''\012declare -x LANG="C.UTF-8"\012declare -x LOGNAME="user"\012declare -- MACHTYPE="x86_64-pc-linux-gnu"\012declare -x OLDPWD="/workspace"\012declare -- OSTYPE="linux-gnu"\012declare -x PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\012declare -- PS4="+ "\012declare -x SHELL="/bin/bash"\012declare -x TERM="dumb"\012declare -x TMPDIR="/tmp"\012declare -x USER="user"\012builtin cd -- /workspace\012','\012',char(10)));
CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        sandbox_id TEXT NOT NULL,
        created_at TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        files INTEGER NOT NULL,
        digest TEXT NOT NULL,
        label TEXT,
        path TEXT NOT NULL, reason TEXT NOT NULL DEFAULT 'manual', complete INTEGER NOT NULL DEFAULT 1);
INSERT INTO snapshots VALUES('snap-ef0226c9da91','bf75f0a258ff','2026-12-01T13:18:37.299Z',204,2,'sha256:84b6519bea816ebca23cbd29bb8856989dce427ee9a193bebb947ba8a349ff92','','snapshots/bf75f0a258ff/snap-ef0226c9da91.tar.zst','manual',1);
CREATE INDEX snapshots_by_sandbox ON snapshots(sandbox_id, created_at);
COMMIT;
