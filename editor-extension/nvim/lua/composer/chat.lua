-- The chat buffer, `composer://chat`: a Markdown transcript of `session/update` notifications,
-- appended as they arrive. Streamed text extends the last line, each tool call is one line whose
-- status (and a running command's latest output line) changes in place, and edits show as
-- ```diff blocks. Read-only for the user; the keymaps
-- that send prompts are set by lua/composer/init.lua.

local Chat = {}
local H = {}

Chat.name = 'composer://chat'

--- Lines of a tool's text output shown (the rest is elided); set from the config.
Chat.max_output_lines = 8

H.status = {
  pending = 'pending',
  in_progress = 'running',
  completed = 'done',
  failed = 'failed',
}

H.reset = function()
  -- toolCallId -> { line = 0-based line of its status line, title, status, shown = {content key} }
  H.tools = {}
  -- Who spoke last ('user' or 'agent'), and whether the last line is streamed text to extend.
  H.speaker, H.streaming = nil, false
end
H.reset()

--- The chat buffer (created on first use), and whether it was just created.
---@return integer, boolean
function Chat.buf()
  if H.buf and vim.api.nvim_buf_is_valid(H.buf) then
    return H.buf, false
  end
  H.buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(H.buf, Chat.name)
  vim.bo[H.buf].bufhidden = 'hide'
  vim.bo[H.buf].filetype = 'markdown'
  vim.bo[H.buf].modifiable = false
  H.reset()
  return H.buf, true
end

--- Shows the chat in a window (opening one with `open_cmd` if none shows it); `focus` moves
--- the cursor there, else it stays where it was.
---@param open_cmd string
---@param focus boolean
function Chat.show(open_cmd, focus)
  local buf, here = Chat.buf(), vim.api.nvim_get_current_win()
  local win = vim.fn.bufwinid(buf)
  if win == -1 then
    vim.cmd(open_cmd)
    win = vim.api.nvim_get_current_win()
    vim.api.nvim_win_set_buf(win, buf)
    vim.wo[win].wrap = true
    vim.wo[win].linebreak = true
  end
  vim.api.nvim_set_current_win(focus and win or here)
  H.follow(buf, vim.api.nvim_buf_line_count(buf))
end

--- Empties the transcript (a new session).
function Chat.clear()
  H.set(Chat.buf(), 0, -1, {})
  H.reset()
end

--- Appends streamed text; a change of speaker starts a new section.
---@param text string
---@param who 'user'|'agent'
function Chat.text(text, who)
  local buf = Chat.buf()
  H.speak(buf, who)
  local parts = vim.split(text, '\n', { plain = true })
  local n = vim.api.nvim_buf_line_count(buf)
  if H.streaming then
    local last = vim.api.nvim_buf_get_lines(buf, n - 1, n, false)[1]
    parts[1] = last .. parts[1]
    H.set(buf, n - 1, n, parts)
    H.follow(buf, n)
  else
    H.append(buf, parts)
  end
  H.streaming = true
end

--- A tool call or an update to one (ACP `tool_call` / `tool_call_update`).
---@param update table
function Chat.tool(update)
  local buf = Chat.buf()
  H.speak(buf, 'agent')
  local tool = H.tools[update.toolCallId]
  if not tool then
    tool = { title = update.toolCallId, status = 'pending', shown = {} }
    H.tools[update.toolCallId] = tool
  end
  tool.title = H.str(update.title) or tool.title
  tool.status = H.str(update.status) or tool.status
  local content = type(update.content) == 'table' and update.content or {}
  -- A running command's output (its tail, resent a few times a second) shows as its last line on
  -- the status line, changed in place; the final update's content is appended once.
  local running = tool.status == 'in_progress'
  tool.last = running and (H.last_line(content) or tool.last) or nil
  local line = ('* %s [%s]'):format(tool.title, H.status[tool.status] or tool.status)
  if tool.last then
    line = line .. ' ' .. tool.last
  end
  if tool.line then
    H.set(buf, tool.line, tool.line + 1, { line })
  else
    tool.line = H.append(buf, { line })
  end
  if running then
    return
  end
  for _, item in ipairs(content) do
    local lines = H.content(item)
    local key = table.concat(lines, '\n')
    if #lines > 0 and not tool.shown[key] then
      tool.shown[key] = true
      H.append(buf, lines)
    end
  end
end

--- The agent's plan, as a checklist.
---@param entries table[]
function Chat.plan(entries)
  local mark = { completed = 'x', in_progress = '~' }
  local lines = { 'Plan:' }
  for _, entry in ipairs(entries or {}) do
    lines[#lines + 1] = ('- [%s] %s'):format(mark[entry.status] or ' ', entry.content)
  end
  H.append(Chat.buf(), lines)
end

--- A line of its own in italics: how a turn ended, an error, a question being asked.
---@param text string
function Chat.note(text)
  H.append(Chat.buf(), { '', '_' .. text .. '_' })
end

--- Starts a section when the speaker changes.
function H.speak(buf, who)
  if who ~= H.speaker then
    H.append(buf, { '', who == 'user' and '## You' or '## Composer', '' })
    H.speaker = who
  end
end

--- The lines rendering one item of a tool call's content.
---@param item table
---@return string[]
function H.content(item)
  if item.type == 'diff' then
    local path = vim.fn.fnamemodify(item.path or '', ':~:.')
    local old = H.str(item.oldText) or ''
    local diff = (vim.text and vim.text.diff or vim.diff)(old, item.newText or '', { ctxlen = 3 })
    local lines = { '```diff', '--- ' .. (old == '' and '/dev/null' or path), '+++ ' .. path }
    vim.list_extend(lines, vim.split(vim.trim(diff --[[@as string]]), '\n', { plain = true }))
    lines[#lines + 1] = '```'
    return lines
  end
  local block = item.type == 'content' and item.content or {}
  local text = H.str(block.text)
  if not text or vim.trim(text) == '' then
    return {}
  end
  local out = vim.split(vim.trim(text), '\n', { plain = true })
  local lines = {}
  for i = 1, math.min(#out, Chat.max_output_lines) do
    lines[i] = '    ' .. out[i]
  end
  if #out > Chat.max_output_lines then
    lines[#lines + 1] = ('    ... (%d more lines)'):format(#out - Chat.max_output_lines)
  end
  return lines
end

--- The last non-blank line of a text content item, shortened: a running command's latest output.
---@param content table[]
---@return string?
function H.last_line(content)
  local block = content[1] and content[1].type == 'content' and content[1].content or {}
  -- \r too: a progress bar redraws its line with it
  local lines = vim.split(vim.trim(H.str(block.text) or ''), '[\r\n]+')
  local last = vim.trim(lines[#lines] or '')
  if last == '' then
    return nil
  end
  return '— ' .. (vim.fn.strchars(last) > 60 and vim.fn.strcharpart(last, 0, 59) .. '…' or last)
end

--- `value` if it is a string (JSON null arrives as vim.NIL).
function H.str(value)
  return type(value) == 'string' and value or nil
end

--- Appends lines at the end; returns the 0-based index of the first.
function H.append(buf, lines)
  local n = vim.api.nvim_buf_line_count(buf)
  local empty = n == 1 and vim.api.nvim_buf_get_lines(buf, 0, 1, false)[1] == ''
  local first = empty and 0 or n
  H.set(buf, first, -1, lines)
  H.streaming = false
  H.follow(buf, n)
  return first
end

function H.set(buf, first, last, lines)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, first, last, false, lines)
  vim.bo[buf].modifiable = false
end

--- Keeps windows that were at the end of the chat (before `old_count` lines) at the end.
function H.follow(buf, old_count)
  local count = vim.api.nvim_buf_line_count(buf)
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if vim.api.nvim_win_get_cursor(win)[1] >= old_count then
      vim.api.nvim_win_set_cursor(win, { count, 0 })
    end
  end
end

return Chat
