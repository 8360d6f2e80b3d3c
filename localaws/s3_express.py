"""The directory-bucket protocol (S3 Express One Zone) in front of moto's S3 server, which has none of it:
CreateSession, and requests signed for the `s3express` service.

What a client does with a bucket named `<base>--<zone id>--x-s3` (S3's endpoint rules, as botocore's
endpoint ruleset resolves them for a custom endpoint: backend `S3Express`, auth `sigv4-s3express`, signing
name `s3express`; the CRT client that s3torchconnector uses follows the same rules):
- it first calls CreateSession, `GET /?session` (or `/<bucket>?session` path-style). The answer is
  `CreateSessionResult/Credentials {SessionToken, SecretAccessKey, AccessKeyId, Expiration}` (S3 API
  reference, CreateSession; botocore's s3 model, CreateSessionOutput);
- then it signs every object call with those credentials for service `s3express` and sends the token in
  `x-amz-s3session-token` (S3 user guide, "CreateSession authorization").

Here: any CreateSession gets fixed credentials valid until 2099 (assumed: no expiry or refresh is
exercised), and a request signed for `s3express` reaches moto as one signed for `s3`, whose dispatcher
routes by the signing name; moto checks no signature. Each CreateSession is kept in `sessions`: the bucket
its path names (boto3, path-style), or None when it names none. Observed here with s3torchconnector 1.5.0:
its CRT credentials provider sends `GET /?session=` to the endpoint's own host even path-style, so the
bucket goes unnamed (on AWS it is the virtual host, `<bucket>.s3express-<zone id>.<region>.amazonaws.com`).
Nothing here enforces IAM: tests/iam does.
"""

from __future__ import annotations

from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

SESSION_QUERY = ("session", "session=")
CREDENTIALS = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<CreateSessionResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Credentials>'
    b"<SessionToken>local-session</SessionToken><SecretAccessKey>local</SecretAccessKey>"
    b"<AccessKeyId>local</AccessKeyId><Expiration>2099-01-01T00:00:00Z</Expiration>"
    b"</Credentials></CreateSessionResult>"
)


class ExpressSessions:
    """WSGI middleware: answers CreateSession, passes everything else on as plain S3."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sessions: list[str | None] = []  # the bucket each CreateSession named (None: none), in order

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("QUERY_STRING", "") in SESSION_QUERY:
            self.sessions.append(environ.get("PATH_INFO", "/").strip("/") or None)
            start_response(
                "200 OK", [("Content-Type", "application/xml"), ("Content-Length", str(len(CREDENTIALS)))]
            )
            return [CREDENTIALS]
        authorization = environ.get("HTTP_AUTHORIZATION", "")
        if "/s3express/aws4_request" in authorization:
            environ["HTTP_AUTHORIZATION"] = authorization.replace("/s3express/", "/s3/")
        return self.app(environ, start_response)


class ExpressMotoServer(ThreadedMotoServer):
    """moto's threaded server with ExpressSessions in front (its own _server_entry, wrapped)."""

    def __init__(self, ip_address: str, port: int) -> None:
        super().__init__(ip_address=ip_address, port=port, verbose=False)
        self.express = ExpressSessions(DomainDispatcherApplication(create_backend_app))

    def _server_entry(self) -> None:
        self._server = make_server(
            self._ip_address, self._port, self.express, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()
