// What the client throws: one class, AuditrecError, whose `kind` says what went wrong and
// whose `retriable` says whether trying again later may help.
//
//   kind          status     retriable
//   unreachable   null       yes   no answer after every attempt (refused, cut, timed out)
//   invalid       422        no    one line per invalid item in `problems`; nothing published
//   unauthorized  401        no    a missing or wrong token
//   forbidden     403        no    the token lacks the scope the call needs (`scope`: the one
//                                  it needs), or the body is not the sender's to send
//   not_found     404        no    no such audit
//   unavailable   429 / 5xx  yes   still answered after every attempt
//   api           other      no    any other error answer

export class AuditrecError extends Error {
  constructor(message, { kind, status = null, detail = null, scope = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "AuditrecError";
    this.kind = kind;
    this.status = status;
    this.detail = detail;
    this.retriable = kind === "unreachable" || kind === "unavailable";
    /** 403: the scope the call needs and the token lacks (null when another refusal). */
    this.scope = scope;
  }

  /** The problems auditrec named (422: one line per invalid item or field). */
  get problems() {
    if (Array.isArray(this.detail)) return this.detail.map(String);
    return this.detail === null ? [] : [String(this.detail)];
  }
}

function kindOf(status) {
  if (status === 422) return "invalid";
  if (status === 401) return "unauthorized";
  if (status === 403) return "forbidden";
  if (status === 404) return "not_found";
  if (status === 429 || status >= 500) return "unavailable";
  return "api";
}

/** The error for an answer of `status` whose JSON body is `body` (`{"detail": ...}`). */
export function errorFor(status, body) {
  const detail = body !== null && typeof body === "object" && "detail" in body ? body.detail : body;
  const said = Array.isArray(detail) ? detail.join("; ") : String(detail);
  const scope = status === 403 ? /\bneeds scope (\w+)/.exec(said)?.[1] : undefined;
  const why = status !== 403 ? "" : scope ? ` forbidden (the token lacks scope ${scope})` : " forbidden";
  return new AuditrecError(`auditrec answered ${status}${why}: ${said}`, {
    kind: kindOf(status),
    status,
    detail,
    scope: scope ?? null,
  });
}
