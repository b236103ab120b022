from pathlib import Path

from django.conf import settings
from django.db.backends.postgresql import base, client

from engram_site import embedded_pg


def fill_in_server(settings_dict: dict) -> embedded_pg.EmbeddedDatabase:
    """Start or join the embedded server and write its socket and port into ``settings_dict``.

    The dict is the connection's own, the same object as ``settings.DATABASES[alias]``, so
    code that reads HOST/PORT after a connection (a URL for a subprocess) sees the server.
    """
    database = embedded_pg.join(Path(settings.ENGRAM_HOME))
    settings_dict["HOST"] = database.socket_dir
    settings_dict["PORT"] = str(database.port)
    return database


class DatabaseClient(client.DatabaseClient):
    def runshell(self, parameters):
        # dbshell runs psql without connecting first.
        fill_in_server(self.connection.settings_dict)
        super().runshell(parameters)


class DatabaseWrapper(base.DatabaseWrapper):
    client_class = DatabaseClient

    def get_connection_params(self):
        # Every new connection (and the test runner's connection to "postgres") passes here.
        fill_in_server(self.settings_dict)
        return super().get_connection_params()
