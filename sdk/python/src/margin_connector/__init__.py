"""margin_connector: links a Planner to Margin at /machine and runs it (SPEC O3).

You write a Handler; the SDK does the link: `hello` (resumable by default),
heartbeats, credential renewal, one Turn per `invoke` with typed tool calls,
the reply, answers acknowledged and delivered once, Stop, `resume` after a
drop, and replies and run reports kept until the server acknowledges them
(SPEC L10). The protocol it speaks is docs/connecting-a-planner.md.

Modules: connector (links, `run`), serving (one driver per machine: dispatch,
resume, what is kept and sent again), handler (Handler, Turn, SessionHandle,
Answer), calls, outbox, linksocket, held, credential, errors, ended, backoff;
wire, protocol and tools are generated from docs/protocol/.
"""

from .backoff import backoff
from .connector import Connector, Linked, Welcome
from .credential import read_credential_file, write_credential_file
from .ended import Ended, describe_ended, is_final
from .errors import ConnectError, MarginError, ToolError, is_refusal
from .handler import Answer, Handler, Question, SessionHandle, Turn
from .held import Held, KeptRun
from .tools import TOOLS, ToolSpec

__all__ = [
    "Answer",
    "ConnectError",
    "Connector",
    "Ended",
    "Handler",
    "Held",
    "KeptRun",
    "Linked",
    "MarginError",
    "Question",
    "SessionHandle",
    "TOOLS",
    "ToolError",
    "ToolSpec",
    "Turn",
    "Welcome",
    "backoff",
    "describe_ended",
    "is_final",
    "is_refusal",
    "read_credential_file",
    "write_credential_file",
]
