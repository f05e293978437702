-- :ComposerChanges (:help composer-changes): the changes of the chat session's last turn, hunk by
-- hunk (composer/turnChanges), in a scratch buffer (`composer://changes`, filetype diff), where
-- `u` undoes the hunk under the cursor and `K` keeps it (composer/reviewHunks). An undo lists the
-- changes again (since the same checkpoint): the indices of the hunks after it shift. One request
-- at a time: keys pressed while one runs are ignored. A turn started in the session after the
-- listing makes the buffer out of date: `u`, `K` and `R` are refused until :ComposerChanges.

local Changes = {}
local H = {}

H.ns = vim.api.nvim_create_namespace('composer-changes')

--- What the buffer shows: { client, session_id, root, checkpoint, hunks = { [line] = spot },
--- busy, stale }, a spot being { path, status, index, digest, header, lines, first } (first: the
--- line of its `@@` header). `checkpoint` is the first listing's, which every re-list names;
--- `busy`: a request of the buffer runs; `stale`: a newer turn started in the session.
H.state = nil
--- Hunks kept in this Neovim, by H.key -> true: marked again when re-listed.
H.kept = {}

Changes.help = 'u: undo the hunk under the cursor   K: keep it   <CR>: open the file there   '
  .. ']c/[c: next/previous hunk   R: list again   q: close'

--- Lists the changes of `session_id`'s last turn into the changes buffer and shows it (with
--- `open_cmd` where no window shows it).
---@param client vim.lsp.Client
---@param session_id string
---@param open_cmd string
function Changes.open(client, session_id, open_cmd)
  local state = {
    client = client,
    session_id = session_id,
    root = client.root_dir or vim.fn.getcwd(),
    hunks = {},
  }
  H.list(state, function(ok)
    if ok then
      H.show(open_cmd)
    end
  end)
end

--- A turn of `session_id` starts (init.lua): a buffer listing that session's changes is out of
--- date from now on.
---@param session_id string
function Changes.turn_started(session_id)
  local state = H.state
  if not state or state.session_id ~= session_id or state.stale then
    return
  end
  state.stale = true
  local buf = vim.fn.bufnr('composer://changes')
  if buf ~= -1 then
    H.set_lines(buf, 0, 1, { H.top(state) })
  end
end

--- Asks for `state`'s changes (since its checkpoint, once it has one) and renders them, `state`
--- becoming the buffer's; `done(ok)` after. Another listing made since wins: this one is dropped.
function H.list(state, done)
  local params = { sessionId = state.session_id, checkpointId = state.checkpoint }
  state.client:request('composer/turnChanges', params, function(err, result)
    if err or type(result) ~= 'table' then
      H.notify(err and err.message or 'composer/turnChanges answered nothing', vim.log.levels.WARN)
      return done and done(false)
    end
    if H.state and H.state ~= state and state.checkpoint then
      return done and done(false) -- :ComposerChanges listed afresh meanwhile
    end
    H.state = state
    state.checkpoint = state.checkpoint or result.checkpointId
    state.hunks = {}
    H.render(type(result.files) == 'table' and result.files or {})
    if done then
      done(true)
    end
  end)
end

--- The changes buffer, made (with its keymaps) on first use.
function H.buf()
  local buf = vim.fn.bufnr('composer://changes')
  if buf ~= -1 then
    return buf
  end
  buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, 'composer://changes')
  vim.bo[buf].filetype = 'diff'
  vim.bo[buf].modifiable = false
  local function map(lhs, fn, desc)
    vim.keymap.set('n', lhs, fn, { buffer = buf, nowait = true, desc = 'Composer: ' .. desc })
  end
  map('u', Changes.undo, 'undo the hunk under the cursor')
  map('K', Changes.keep, 'keep the hunk under the cursor')
  map('<CR>', Changes.jump, 'open the file at the hunk')
  map(']c', function()
    H.step(1)
  end, 'next hunk')
  map('[c', function()
    H.step(-1)
  end, 'previous hunk')
  map('R', Changes.refresh, 'list the changes again')
  map('q', '<Cmd>close<CR>', 'close')
  return buf
end

--- Shows the buffer: in its window if one shows it, else in a new one.
function H.show(open_cmd)
  local buf = H.buf()
  local win = vim.fn.bufwinid(buf)
  if win == -1 then
    vim.cmd(open_cmd)
    win = vim.api.nvim_get_current_win()
    vim.api.nvim_win_set_buf(win, buf)
  end
  vim.api.nvim_set_current_win(win)
  H.step(1, 1)
end

--- Writes the files' hunks into the buffer: one section per file, each hunk as in a diff.
function H.render(files)
  local buf, state = H.buf(), H.state
  local out = { H.top(state) }
  for _, file in ipairs(files) do
    local path = tostring(file.path)
    out[#out + 1] = ''
    out[#out + 1] = ('diff %s (%s)'):format(path, file.status or 'modified')
    out[#out + 1] = file.status == 'added' and '--- /dev/null' or '--- a/' .. path
    out[#out + 1] = file.status == 'deleted' and '+++ /dev/null' or '+++ b/' .. path
    if file.binary then
      out[#out + 1] = '# binary or too large: not shown hunk by hunk'
    end
    for _, hunk in ipairs(type(file.hunks) == 'table' and file.hunks or {}) do
      local spot = {
        path = path,
        status = file.status,
        index = hunk.index,
        digest = hunk.digest,
        header = hunk.header,
        first = #out + 1,
      }
      out[#out + 1] = tostring(hunk.header)
      state.hunks[#out] = spot
      local shown = {}
      for _, line in ipairs(type(hunk.lines) == 'table' and hunk.lines or {}) do
        shown[#shown + 1] = (tostring(line):gsub('\n', ''))
        out[#out + 1] = shown[#shown]
        state.hunks[#out] = spot
      end
      spot.lines = shown
    end
  end
  if #files == 0 then
    out[#out + 1] = ''
    out[#out + 1] = '# No changes since the turn started.'
  end
  H.set_lines(buf, 0, -1, out)
  H.mark_kept(state)
end

--- The buffer's first line: what it lists, or that it is out of date.
function H.top(state)
  if state.stale then
    return '# Out of date: a newer turn started in this session. :ComposerChanges lists its changes.'
  end
  return '# Changes of the last turn. ' .. Changes.help
end

function H.set_lines(buf, first, last, replacement)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, first, last, false, replacement)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
end

--- A hunk's key among the kept: its file, where it starts in the file as it was at the checkpoint
--- (the `-a,b` of its header) and its lines, none of which an undo elsewhere in the file moves
--- (unlike its index, its digest and the new side of its header).
function H.key(state, spot)
  local start = tostring(spot.header):match('^@@ %-(%d+)') or ''
  return table.concat(
    { state.checkpoint or '', spot.path, start, table.concat(spot.lines or {}, '\n') },
    '\0'
  )
end

--- Marks "kept" the hunks of `state` kept in this Neovim.
function H.mark_kept(state)
  local buf = H.buf()
  vim.api.nvim_buf_clear_namespace(buf, H.ns, 0, -1)
  for line, spot in pairs(state.hunks) do
    if spot.first == line and H.kept[H.key(state, spot)] then
      vim.api.nvim_buf_set_extmark(buf, H.ns, line - 1, 0, {
        virt_text = { { '  kept', 'DiagnosticOk' } },
        virt_text_pos = 'eol',
      })
    end
  end
end

--- Whether `u`, `K` or `R` may send a request now (else says why): not while one runs, nor once
--- a newer turn started.
function H.ready(state)
  if state.stale then
    H.notify(
      'these changes are out of date (a newer turn started): :ComposerChanges lists the new ones',
      vim.log.levels.WARN
    )
    return false
  end
  if state.busy then
    H.notify('still waiting for the last request; try again once it answers', vim.log.levels.INFO)
    return false
  end
  return true
end

--- The hunk under the cursor of the changes window, else nil (with a message).
function H.spot()
  local line = vim.api.nvim_win_get_cursor(0)[1]
  local spot = H.state and vim.api.nvim_get_current_buf() == H.buf() and H.state.hunks[line]
  if not spot then
    H.notify('no hunk under the cursor', vim.log.levels.INFO)
  end
  return spot or nil
end

--- The listing's state, the hunk under the cursor and its pick ({path, index, digest}) when a
--- request about it may go out now; nothing (and a message) otherwise.
function H.pick()
  local spot = H.spot()
  if not spot or not H.ready(H.state) then
    return nil
  end
  return H.state, spot, { path = spot.path, index = spot.index, digest = spot.digest }
end

--- `u`: undoes the hunk under the cursor (its lines go back to what they were before the turn;
--- every other line stays), then lists the changes again, as the indices after it shift.
function Changes.undo()
  local state, spot, pick = H.pick()
  if not state then
    return
  end
  H.review(state, { undo = { pick } }, function(result)
    if type(result.undone) == 'table' and #result.undone > 0 then
      H.notify(('undid a change to %s'):format(spot.path), vim.log.levels.INFO)
    end
    H.relist(state)
  end)
end

--- `K`: keeps the hunk under the cursor (tells the server it was right), moves on, and marks it
--- once the server took it; a refused keep lists the changes again instead.
function Changes.keep()
  local state, spot, pick = H.pick()
  if not state then
    return
  end
  H.review(state, { keep = { pick } }, function(result)
    local kept = false
    for _, taken in ipairs(type(result.kept) == 'table' and result.kept or {}) do
      kept = kept
        or (type(taken) == 'table' and taken.path == pick.path and taken.index == pick.index)
    end
    if not kept then
      if not (type(result.refused) == 'table' and result.refused[pick.path]) then
        H.notify(('%s: the hunk was not kept'):format(pick.path), vim.log.levels.WARN)
      end
      return H.relist(state)
    end
    state.busy = false
    H.kept[H.key(state, spot)] = true
    if H.state == state then
      H.mark_kept(state)
    end
  end)
  H.step(1)
end

--- composer/reviewHunks with `picks`, its refusals shown; `done(result)` when it answered. The
--- buffer is busy from now until `done` (or the re-list it starts) clears it.
function H.review(state, picks, done)
  state.busy = true
  local params = vim.tbl_extend('force', {
    sessionId = state.session_id,
    checkpointId = state.checkpoint,
    undo = {},
    keep = {},
  }, picks)
  state.client:request('composer/reviewHunks', params, function(err, result)
    if err or type(result) ~= 'table' then
      H.notify(err and err.message or 'composer/reviewHunks answered nothing', vim.log.levels.WARN)
      return H.relist(state)
    end
    for path, why in pairs(type(result.refused) == 'table' and result.refused or {}) do
      H.notify(('%s was left as it is: %s'):format(path, tostring(why)), vim.log.levels.WARN)
    end
    done(result)
  end)
end

--- Lists `state`'s changes again, the cursor kept on its line (clamped); busy until answered.
function H.relist(state)
  local buf = H.buf()
  local win = vim.fn.bufwinid(buf)
  local line = win ~= -1 and vim.api.nvim_win_get_cursor(win)[1] or 1
  state.busy = true
  H.list(state, function(ok)
    state.busy = false
    if H.state ~= state then
      return
    end
    win = vim.fn.bufwinid(buf)
    if ok and win ~= -1 then
      vim.api.nvim_win_set_cursor(win, { math.min(line, vim.api.nvim_buf_line_count(buf)), 0 })
    end
  end)
end

--- `R`: lists the changes again.
function Changes.refresh()
  if H.state and H.ready(H.state) then
    H.relist(H.state)
  end
end

--- `<CR>`: opens the file in the previous window (else a new one above) at the line of the hunk
--- under the cursor, as the file is now.
function Changes.jump()
  local spot = H.spot()
  if not spot then
    return
  end
  if spot.status == 'deleted' then
    return H.notify(
      ('%s was deleted by the turn; u brings it back'):format(spot.path),
      vim.log.levels.INFO
    )
  end
  local buf = H.buf()
  local cursor = vim.api.nvim_win_get_cursor(0)[1]
  local line = tonumber(spot.header:match('^@@ %-%d+,?%d* %+(%d+)')) or 1
  for l = spot.first + 1, cursor - 1 do
    local text = vim.api.nvim_buf_get_lines(buf, l - 1, l, false)[1] or ''
    if not vim.startswith(text, '-') then
      line = line + 1
    end
  end
  local path = vim.fs.joinpath(H.state.root, spot.path)
  local prev = vim.fn.win_getid(vim.fn.winnr('#'))
  if prev ~= 0 and prev ~= vim.api.nvim_get_current_win() then
    vim.api.nvim_set_current_win(prev)
  else
    vim.cmd('aboveleft split')
  end
  vim.cmd.edit(vim.fn.fnameescape(path))
  local last = vim.api.nvim_buf_line_count(0)
  vim.api.nvim_win_set_cursor(0, { math.max(1, math.min(line, last)), 0 })
end

--- Moves the cursor to the next (`dir` 1) or previous (-1) hunk header, from line `from`.
function H.step(dir, from)
  if not H.state then
    return
  end
  local buf = H.buf()
  local line = from and from - dir or vim.api.nvim_win_get_cursor(0)[1]
  local last = vim.api.nvim_buf_line_count(buf)
  local here = H.state.hunks[line]
  for l = line + dir, dir > 0 and last or 1, dir do
    local spot = H.state.hunks[l]
    if spot and spot.first == l and spot ~= here then
      return vim.api.nvim_win_set_cursor(0, { l, 0 })
    end
  end
end

function H.notify(message, level)
  vim.notify('Composer: ' .. message, level)
end

return Changes
