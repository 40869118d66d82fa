// Server-Sent Events over fetch: POST /chat and confirmations stream their events as
// `event: <type>` / `data: <json>` frames. EventSource cannot POST nor send a
// credential header, so the frames are read here, following the SSE rules.

import { ApiError, failure, withCredential } from "./api.js";

/**
 * Send one streamed request and hand each event to `onEvent`.
 * Returns "done" when the turn's `done` event came, "lost" when the connection ended
 * before it. A refusal (404, 409, 422...) throws an ApiError before any event.
 */
export async function streamTurn(path, body, onEvent) {
  const response = await fetch(path, {
    method: "POST",
    headers: withCredential({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body),
  });
  if (!response.ok) throw await failure(response);
  return readEvents(response, onEvent);
}

let replayMissing = false;

/**
 * Follow a session's running turn from the event after id `after` (`SEQ` or `SEQ:K`) of
 * its log (`GET /sessions/{id}/events?after=`, SPEC 12): "done", "lost", or "unsupported"
 * when this server has no such route (the caller then reads the log again later).
 */
export async function follow(sessionId, after, onEvent) {
  if (replayMissing) return "unsupported";
  const path = `/sessions/${encodeURIComponent(sessionId)}/events?after=${after}`;
  let response;
  try {
    response = await fetch(path, {
      headers: withCredential({ Accept: "text/event-stream" }),
    });
  } catch {
    return "lost";
  }
  if (!response.ok) {
    const error = await failure(response);
    if (error.code === "not_found" || error.code === "method_not_allowed") {
      replayMissing = true;
      return "unsupported";
    }
    throw error;
  }
  return readEvents(response, onEvent);
}

// An event id is SEQ, or SEQ:K for the K-th event one log entry stands for (SPEC 12).
const WHOLE_ENTRY = 9999;

/** Whether a session's logged events (`GET /sessions/{id}`) end with their turn's `done`
 * (or there are none): false while a turn runs. */
export function ended(events) {
  const last = events.at(-1);
  return last === undefined || last.type === "done";
}

/**
 * Follow the running turn of a session drawn from its logged `events` to its `done`, from
 * past every event the last of them stands for (the log drew that entry whole); as
 * `follow`.
 */
export function followOn(sessionId, events, onEvent) {
  return follow(sessionId, `${events.at(-1).seq}:${WHOLE_ENTRY}`, onEvent);
}

async function readEvents(response, onEvent) {
  try {
    for await (const frame of frames(response.body)) {
      const event = JSON.parse(frame.data);
      onEvent(event);
      if (event.type === "done") return "done";
    }
  } catch (error) {
    if (error instanceof ApiError || error instanceof SyntaxError) throw error;
    // A network error mid-stream: the turn may go on without us.
  }
  return "lost";
}

/** The frames of an event stream: {event, data, id}, comments and empty frames skipped. */
export async function* frames(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    // A frame ends at a blank line; lines end with \n, \r\n or \r.
    let match;
    while ((match = /\r\n\r\n|\n\n|\r\r/.exec(buffer)) !== null) {
      const frame = parse(buffer.slice(0, match.index));
      buffer = buffer.slice(match.index + match[0].length);
      if (frame !== null) yield frame;
    }
  }
}

function parse(block) {
  const frame = { event: "message", data: [], id: null };
  for (const line of block.split(/\r\n|\n|\r/)) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") frame.data.push(value);
    else if (field === "event") frame.event = value;
    else if (field === "id") frame.id = value;
  }
  return frame.data.length === 0 ? null : { ...frame, data: frame.data.join("\n") };
}
