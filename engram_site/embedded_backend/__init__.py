"""Django's PostgreSQL backend on Engram's embedded server (``DATABASE_URL`` unset).

The settings name this package as the ENGINE and leave HOST and PORT empty; the first
connection of a process (or ``dbshell``) starts or joins the server in ``$ENGRAM_HOME/pgdata``
and fills them in. Starting it here, not while the settings load, keeps importing the
settings free of side effects, and no process that talks to the database can forget it.
"""
