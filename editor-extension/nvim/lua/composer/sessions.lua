-- The chat's sessions: the one the chat uses on each composer-lsp client, made on first use, and
-- after that client's server stopped (:LspRestart, a crash) the same one reloaded by the next
-- client of the root (session/load): the server knows it again, the agent's unsaved buffer edits
-- included, and the chat goes on with the conversation it shows. lua/composer/init.lua asks
-- `get` before each request about the chat's session.

local Sessions = {}

--- Client id -> the chat's session id on that client.
Sessions.by_client = {}
--- Root dir -> the chat's session there, for the next client of the root.
Sessions.roots = {}
--- Session id -> true while session/load replays it (the chat shows it already).
Sessions.reloading = {}
--- Root dir -> { client_id, session?, callbacks } while the chat's session there is made or
--- reloaded on that client: later calls wait for it.
Sessions.pending = {}

--- The key of `client`'s root (a client may have none: the server's own directory).
local function root_of(client)
  return client.root_dir or ''
end

local function notify(message, level)
  vim.notify('Composer: ' .. message, level)
end

--- The chat's session known for `client` (its own, else its root's earlier one), if any.
function Sessions.of(client)
  return Sessions.by_client[client.id] or Sessions.roots[root_of(client)]
end

--- Forgets them all (:ComposerNew): what is being made or reloaded meanwhile is dropped.
function Sessions.reset()
  Sessions.by_client, Sessions.roots, Sessions.pending, Sessions.reloading = {}, {}, {}, {}
end

--- Calls `callback(session_id)` with the chat's session on `client`: the one it has, else the
--- chat's session of the same root on a server that stopped, reloaded (its replay is not shown
--- twice), else a new one. Calls made meanwhile wait for the same session.
function Sessions.get(client, callback)
  local session_id, root = Sessions.by_client[client.id], root_of(client)
  if session_id then
    return callback(session_id)
  end
  local queue = Sessions.pending[root]
  if queue and queue.client_id == client.id then
    table.insert(queue.callbacks, callback)
    return
  elseif queue and queue.session then -- loading on a client that stopped: no answer comes
    Sessions.reloading[queue.session] = nil
  end
  queue = { client_id = client.id, callbacks = { callback } }
  Sessions.pending[root] = queue
  local function settle(id)
    if Sessions.pending[root] ~= queue then
      return -- :ComposerNew emptied the chat meanwhile: what was asked for it is dropped
    end
    Sessions.pending[root] = nil
    if id then
      Sessions.by_client[client.id], Sessions.roots[root] = id, id
      for _, waiter in ipairs(queue.callbacks) do
        waiter(id)
      end
    end
  end
  local function create()
    local params = { cwd = client.root_dir, mcpServers = {} }
    local sent = client:request('session/new', params, function(err, result)
      if err then
        notify('session/new failed: ' .. err.message, vim.log.levels.ERROR)
      end
      settle(not err and result.sessionId)
    end)
    if not sent then
      notify('session/new failed: the server is not running', vim.log.levels.ERROR)
      settle(nil)
    end
  end
  local earlier = Sessions.roots[root]
  if not earlier then
    return create()
  end
  Sessions.reloading[earlier], queue.session = true, earlier
  local params = { sessionId = earlier, cwd = client.root_dir, mcpServers = {} }
  local sent = client:request('session/load', params, function(err)
    Sessions.reloading[earlier] = nil
    if not err then
      return settle(earlier)
    end
    Sessions.roots[root] = nil
    local why = 'could not reopen the chat session (' .. err.message .. '); starting a new one'
    notify(why, vim.log.levels.WARN)
    create()
  end)
  if not sent then
    Sessions.reloading[earlier] = nil
    notify('could not reopen the chat session: the server is not running', vim.log.levels.ERROR)
    settle(nil)
  end
end

return Sessions
